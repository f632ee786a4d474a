package meta

import (
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// resultsFormat is 7 for a queue command that sets a result byte bound
// (docs/jobs.md, "Job results and status"): a replica of format 6 would
// keep the policy without it and push that to the shards. 0 otherwise.
func resultsFormat(c *metapb.Command) uint32 {
	var p *fsmpb.QueuePolicy
	switch k := c.GetCmd().(type) {
	case *metapb.Command_CreateQueue:
		p = k.CreateQueue.GetPolicy()
	case *metapb.Command_UpdateQueue:
		p = k.UpdateQueue.GetPolicy()
	}
	if p.GetCompletedMaxBytesPerShard() != 0 {
		return 7
	}
	return 0
}
