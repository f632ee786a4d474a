package meta

import (
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// resultsFormat is 7 for a queue command that sets a result byte bound
// (docs/jobs.md, "Job results and status"): a replica of format 6 would
// keep the policy without it and push that to the shards. 0 otherwise.
func resultsFormat(c *metapb.Command) uint32 {
	if policyOf(c).GetCompletedMaxBytesPerShard() != 0 {
		return 7
	}
	return 0
}

// policyOf is the policy a queue command carries, nil for other kinds.
func policyOf(c *metapb.Command) *fsmpb.QueuePolicy {
	switch k := c.GetCmd().(type) {
	case *metapb.Command_CreateQueue:
		return k.CreateQueue.GetPolicy()
	case *metapb.Command_UpdateQueue:
		return k.UpdateQueue.GetPolicy()
	}
	return nil
}
