package nodes

// Size is the number of node slots; with NodeID it lets the nemesis and
// the final phase work on any backend's cluster, not only this one.
func (c *Cluster) Size() int { return len(c.Nodes) }

// NodeID is node i's raftq node id ("n1").
func (c *Cluster) NodeID(i int) string { return c.Nodes[i].ID }

// Addr is node i's gRPC address as clients dial it.
func (c *Cluster) Addr(i int) string { return c.Nodes[i].GRPC }
