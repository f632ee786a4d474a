package meta

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
)

// PauseQueue pauses (paused true) or resumes a queue: its shards lease
// nothing while it is paused (docs/jobs.md). The flag is recorded here,
// beside the policy, and pushed to the shards in the policy they enforce
// (shardPolicy). Setting the flag it already has changes nothing.
// ErrNotFound if there is no queue.
func (s *Store) PauseQueue(ctx context.Context, name string, paused bool) (Queue, error) {
	res, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_PauseQueue{PauseQueue: &metapb.PauseQueue{Name: name, Paused: paused}}})
	if err != nil {
		return Queue{}, fmt.Errorf("%s queue %q: %w", pauseVerb(paused), name, err)
	}
	return queueOf(res.GetQueue()), nil
}

func pauseVerb(paused bool) string {
	if paused {
		return "pause"
	}
	return "resume"
}

func (f *FSM) pauseQueue(c *metapb.PauseQueue, nowMs int64) *metapb.Result {
	q, ok := f.queues[c.GetName()]
	if !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("queue %q not found", c.GetName())}
	}
	if q.GetPaused() != c.GetPaused() {
		// Replace rather than mutate, as updateQueue does: readers hold
		// clones of the old record.
		q = proto.CloneOf(q)
		q.Paused = c.GetPaused()
		q.UpdatedMs = nowMs
		f.queues[q.GetName()] = q
	}
	return &metapb.Result{Queue: proto.CloneOf(q)}
}
