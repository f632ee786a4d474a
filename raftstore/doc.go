// Package raftstore keeps what one raft replica stores durable and honest:
// who the replica is (replica.json), the durable facts raft relies on
// (facts: the highest term and log index it has made durable), checksums on
// every log entry (made by the leader when it proposes, checked again
// wherever the bytes are stored or read back), and the checks that keep a
// replica with less than it had from voting or serving. docs/operations.md
// describes what each failure looks like and how to repair it.
package raftstore
