// Package raftgroup is the raft plumbing that every raft group of a node
// shares, the queue shards and the meta group alike: opening a replica
// through raftstore's checked stores (OpenRaft), the snapshot store and
// its scheduler, the watch on log and stable-store writes (DiskWatch), the
// not-leader refusal (NotLeaderError) and waiting for raft futures
// (WaitFuture). What a group replicates is its owner's business: shard
// runs the queue FSM on it, meta the control plane's.
package raftgroup
