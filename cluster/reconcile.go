package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/shard"
)

// reconcileEvery bounds how long a divergence can survive when no meta or
// leadership change wakes the reconciler (e.g. a failed proposal).
const reconcileEvery = 2 * time.Second

// reconcileLoop makes a locally led shard's queues match meta. It runs when
// meta changes, when the shard gains leadership, and periodically. The API
// layer proposes queue changes to every shard directly; this is the safety
// net that catches shards that were down or leaderless at the time.
func (n *Node) reconcileLoop(ctx context.Context, id uint32, s *shard.Shard) {
	changes, stopMeta := n.meta.Changes()
	defer stopMeta()
	leader, stopLead := s.Subscribe()
	defer stopLead()
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	r := &reconciler{n: n, id: id, s: s, absentSince: map[string]time.Time{}}
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	h := &handOff{n: n, id: id, s: s}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case ready := <-leader:
			h.leading(ready)
			if ready {
				retry.Reset(n.cfg.PreferredLeaderDelay)
			}
		case <-tick.C:
		case <-retry.C:
		}
		if !s.IsLeader() {
			continue
		}
		if n.updateAddresses(ctx, s.Raft()) || h.maybe(ctx) {
			retry.Reset(200 * time.Millisecond)
			continue
		}
		if err := r.run(ctx); err != nil && ctx.Err() == nil {
			n.logger.Debug("reconcile shard queues; retrying", "shard", id, "err", err)
			retry.Reset(200 * time.Millisecond)
		}
	}
}

type reconciler struct {
	n  *Node
	id uint32
	s  *shard.Shard
	// absentSince: when a queue the shard holds was first seen missing from
	// the local meta replica. The delete waits DeleteGrace, so a meta
	// replica that lags the API layer's direct upsert never deletes a
	// freshly created queue (and its messages).
	absentSince map[string]time.Time
}

// metaMaxLag bounds how stale the local meta replica may be (time since it
// last heard from the meta leader) for the reconciler to act on it.
const metaMaxLag = time.Second

func (r *reconciler) run(ctx context.Context) error {
	if !r.n.meta.Current(ctx, metaMaxLag) {
		// A stale replica (restarted, partitioned from the meta leader)
		// could list too few queues or old policies; deleting or rolling
		// back on its word would destroy acknowledged messages. Wait.
		r.absentSince = map[string]time.Time{}
		return nil
	}
	want := r.n.meta.QueuePolicies()
	have := r.s.FSM().Queues()
	for name, p := range want {
		if hp, ok := have[name]; ok && proto.Equal(hp, p) {
			continue
		}
		if err := r.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_UpsertQueue{UpsertQueue: &fsmpb.UpsertQueue{Queue: name, Policy: p}}}); err != nil {
			return fmt.Errorf("upsert %q: %w", name, err)
		}
	}
	now := time.Now()
	for name := range r.absentSince {
		if _, ok := have[name]; !ok || want[name] != nil {
			delete(r.absentSince, name)
		}
	}
	for name := range have {
		if _, ok := want[name]; ok {
			continue
		}
		first, seen := r.absentSince[name]
		if !seen {
			r.absentSince[name] = now
			continue
		}
		if now.Sub(first) < r.n.cfg.DeleteGrace {
			continue
		}
		if err := r.propose(ctx, &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: name}}}); err != nil {
			return fmt.Errorf("delete %q: %w", name, err)
		}
		delete(r.absentSince, name)
	}
	return nil
}

func (r *reconciler) propose(ctx context.Context, cmd *fsmpb.Command) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := r.s.Propose(ctx, cmd)
	if err != nil {
		return err
	}
	if c := res.GetStatus().GetCode(); c != fsmpb.Code_CODE_OK && c != fsmpb.Code_CODE_QUEUE_NOT_FOUND {
		return fmt.Errorf("shard %d rejected %T: %v %s", r.id, cmd.GetCmd(), c, res.GetStatus().GetMessage())
	}
	r.n.logger.Debug("reconciled queue", "shard", r.id, "cmd", cmd.GetCmd())
	return nil
}
