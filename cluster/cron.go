package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/raftq/raftq/cron"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
)

// cronTick is how often the meta leader looks for due slots: an
// "@every 1s" schedule fires within this of its slot.
const cronTick = 200 * time.Millisecond

// cronPassTimeout bounds one schedule's sends and record, so a schedule
// whose queue cannot take messages holds the others back at most this.
const cronPassTimeout = 5 * time.Second

// cronKeyHold is the least time a slot's dedup key is held (unique_for_ms,
// fsm/unique.go), whatever the queue's dedup window: a successor leader
// that resends a slot its predecessor sent but did not record finds the
// first message this long after, so a short window on the queue does not
// shorten how long a meta failover may last without a double fire.
const cronKeyHold = time.Hour

// maxTriggersPerPass bounds the manual triggers one pass sends.
const maxTriggersPerPass = 100

// cronLoop fires recurring jobs while this node leads the meta group
// (docs/jobs.md, "Recurring jobs (cron)"). Each pass sends the due slots
// of every schedule with the slot's dedup key, then records the last one
// it sent in the meta log. A leader that dies between the two leaves the
// slot unrecorded; its successor sends it again under the same key, and
// the shard answers with the first message (the queue's dedup window must
// outlast the failover, which a window of minutes does).
func (n *Node) cronLoop(ctx context.Context) {
	tick := time.NewTicker(cronTick)
	defer tick.Stop()
	var settled uint64 // the meta term whose earlier entries this node has applied
	var warn oncePerReason
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !n.meta.IsLeader() {
			settled = 0
			continue
		}
		// A new leader may not have applied its predecessor's last
		// records yet; reading them stale would resend recorded slots
		// (deduplicated, but counted twice).
		if term := n.meta.Raft().CurrentTerm(); term != settled {
			bctx, cancel := context.WithTimeout(ctx, cronPassTimeout)
			err := n.meta.Barrier(bctx)
			cancel()
			if err != nil {
				if warn.changed(err) {
					n.logger.Warn("cron: waiting for the meta log to apply", "err", err)
				}
				continue
			}
			settled = term
		}
		caller, err := n.shardCaller()
		if err != nil {
			continue
		}
		for _, s := range n.meta.CronSchedules() {
			if err := n.fireSchedule(ctx, caller, s); warn.changed(err) {
				n.logger.Warn("cron: firing", "schedule", s.GetName(), "queue", s.GetQueue(), "err", err)
			}
		}
	}
}

// cronPolicy is a schedule's misfire policy in cron's terms.
func cronPolicy(s *metapb.CronSchedule) cron.Policy {
	p := cron.Policy{Grace: time.Duration(s.GetMisfireGraceMs()) * time.Millisecond, CatchUpMax: int(s.GetCatchUpMax())}
	if p.Grace == 0 {
		p.Grace = cron.DefaultGrace
	}
	switch s.GetMisfire() {
	case metapb.CronMisfire_CRON_MISFIRE_SKIP:
		p.Misfire = cron.Skip
	case metapb.CronMisfire_CRON_MISFIRE_CATCH_UP:
		p.Misfire = cron.CatchUp
	default:
		p.Misfire = cron.FireOnce
	}
	return p
}

// cronPlan is what one pass of schedule s does at now.
func cronPlan(s *metapb.CronSchedule, now time.Time) (cron.Plan, []*fsmpb.NewMessage, error) {
	if s.GetPaused() {
		return cron.Plan{}, nil, nil
	}
	spec, err := cron.Parse(s.GetSpec(), s.GetTimeZone())
	if err != nil {
		return cron.Plan{}, nil, fmt.Errorf("schedule %q: %w", s.GetName(), err)
	}
	from := time.UnixMilli(max(s.GetAfterMs(), s.GetLastSlotMs()))
	plan := cron.PlanPass(spec, time.UnixMilli(s.GetCreatedMs()), from, now, cronPolicy(s))
	msgs := make([]*fsmpb.NewMessage, len(plan.Fire))
	for i, t := range plan.Fire {
		msgs[i] = meta.CronSlotMessage(s, t)
	}
	return plan, msgs, nil
}

// fireSchedule runs one pass for s: its due slots, then its pending
// manual triggers, in one send; then one record of how far it got.
func (n *Node) fireSchedule(ctx context.Context, caller ShardCaller, s *metapb.CronSchedule) error {
	now := n.cfg.Now()
	plan, msgs, err := cronPlan(s, now)
	if err != nil {
		return err
	}
	slots := len(msgs)
	first := s.GetTriggersFired() + 1
	last := min(s.GetTriggersRequested(), s.GetTriggersFired()+maxTriggersPerPass)
	for k := first; k <= last; k++ {
		msgs = append(msgs, meta.CronTriggerMessage(s, k, now))
	}
	if len(msgs) == 0 && plan.Skipped == 0 {
		return nil
	}
	hold := cronKeyHold
	if q, ok := n.meta.Queue(s.GetQueue()); ok {
		hold = max(hold, time.Duration(q.Policy.GetDedupWindowMs())*time.Millisecond)
	}
	for _, m := range msgs {
		m.UniqueForMs = hold.Milliseconds()
	}
	ctx, cancel := context.WithTimeout(ctx, cronPassTimeout)
	defer cancel()
	ok, sendErr := sendPrefix(ctx, caller, s.GetQueue(), msgs)
	rec := &metapb.RecordCronFire{Name: s.GetName(), Id: s.GetId(), TriggersFired: s.GetTriggersFired()}
	switch {
	case slots == 0 && plan.Skipped > 0:
		rec.SlotMs, rec.Skipped = plan.Last.UnixMilli(), plan.Skipped
	case slots > 0 && ok > 0:
		// Only a prefix of slots is settled: a later slot sent while an
		// earlier one failed is sent again next pass (deduplicated).
		done := min(ok, slots)
		rec.SlotMs, rec.Fired, rec.Skipped = plan.Fire[done-1].UnixMilli(), uint64(done), plan.Skipped
	}
	if ok > slots {
		rec.TriggersFired = s.GetTriggersFired() + uint64(ok-slots)
	}
	if rec.GetSlotMs() == 0 && rec.GetTriggersFired() == s.GetTriggersFired() {
		return sendErr
	}
	if err := n.meta.RecordCronFire(ctx, rec); err != nil {
		return err
	}
	return sendErr
}

// sendPrefix sends msgs to queue and reports how many of them, counted
// from the first, the queue took (enqueued or deduplicated), with the
// first failure.
func sendPrefix(ctx context.Context, caller ShardCaller, queue string, msgs []*fsmpb.NewMessage) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	sent, err := caller.Send(ctx, queue, msgs)
	if err != nil {
		return 0, fmt.Errorf("send to %q: %w", queue, err)
	}
	for i, r := range sent {
		if r.Err != nil {
			return i, fmt.Errorf("send to %q: %w", queue, r.Err)
		}
		if st := r.Item.GetStatus(); st.GetCode() != fsmpb.Code_CODE_OK {
			return i, fmt.Errorf("send to %q: shard %d refused: %s", queue, r.Shard, st.GetMessage())
		}
	}
	return len(msgs), nil
}
