package meta

import "github.com/raftq/raftq/meta/metapb"

// deadRetentionFormat is 7 for a queue create or update that sets
// dead_retention_ms (docs/jobs.md, "Dead letters"): a replica of format 6
// would hold a policy that its shards' older replicas cannot enforce alike.
func deadRetentionFormat(c *metapb.Command) uint32 {
	switch k := c.GetCmd().(type) {
	case *metapb.Command_CreateQueue:
		if k.CreateQueue.GetPolicy().GetDeadRetentionMs() != 0 {
			return 7
		}
	case *metapb.Command_UpdateQueue:
		if k.UpdateQueue.GetPolicy().GetDeadRetentionMs() != 0 {
			return 7
		}
	}
	return 0
}
