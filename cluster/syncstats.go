package cluster

import "github.com/raftq/raftq/raftstore"

// DiskSyncStats reports the fsync latencies of the node's raft stores,
// summed over its groups (raftstore.Node.SyncStats).
func (n *Node) DiskSyncStats() []raftstore.SyncStats { return n.ident.SyncStats() }
