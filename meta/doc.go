// Package meta is the control plane of a raftq cluster: a raft group (the
// "meta" group on the raftmux) whose state machine holds the queues with
// their policies and the shard map. Every node keeps a local replica (the
// first voters vote, every further node is a nonvoter), so reads are local
// and writes go through the meta leader.
//
// The FSM is deterministic: commands are protobuf (metapb), stamped with the
// leader's time, applied once per raft index, and snapshotted as one
// versioned record.
package meta
