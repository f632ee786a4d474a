package workload

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/history"
	"github.com/raftq/raftq/meta"
)

// CronQueue receives the cron workload's messages. It is not among the
// workload's Queues: its messages are sent by the cluster, not by a
// client, so the queue checkers have no sends to match them with; the
// workload creates it itself and the cron checker judges it.
const CronQueue = "jepsen-cron"

// cronSchedules fire every second: one catches up every missed slot (up
// to 1000, far beyond any fault's hold), one skips slots later than 2 s,
// so partitions, kills and pauses of the meta leader make it skip.
var cronSchedules = []*raftqv1.ScheduleInfo{
	{Name: "catch-up", Spec: "@every 1s", Queue: CronQueue, Body: []byte("{{slot_ms}}"),
		Misfire: raftqv1.MisfirePolicy_MISFIRE_POLICY_CATCH_UP, CatchUpMax: 1000, MisfireGraceMs: 2000},
	{Name: "skip", Spec: "@every 1s", Queue: CronQueue, Body: []byte("{{slot_ms}}"),
		Misfire: raftqv1.MisfirePolicy_MISFIRE_POLICY_SKIP, MisfireGraceMs: 2000},
}

// cronWorkload runs schedules firing every second under the nemeses
// while consumers take their messages, and triggers them by hand now and
// then; when the run ends it pauses them, records what the meta log says
// each fired, and drains the queue (checker cron).
func cronWorkload() *Workload {
	return &Workload{Name: "cron", run: func(ctx context.Context, env *Env, seed uint64) {
		if err := cronSetup(ctx, env); err != nil {
			env.Rec.Add(history.Op{Type: history.Fail, F: history.FCronState, Error: err.Error()})
			return
		}
		// The checker requires a final record of each schedule once the
		// workload has started.
		env.Rec.Add(history.Op{Type: history.Invoke, F: history.FCronState})
		var wg sync.WaitGroup
		for k := range 2 {
			c := env.NewClient(seed + uint64(k))
			spawn(&wg, func() { cronConsumer(ctx, c) })
		}
		c := env.NewClient(seed + 50)
		spawn(&wg, func() { cronTrigger(ctx, c) })
		wg.Wait()
		// The run is over; the faults still under way are undone within
		// this bound.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		cronFinish(fctx, env, env.NewClient(seed+60))
	}}
}

// retry calls fn on members in turn until it succeeds or ctx ends.
func retry(ctx context.Context, env *Env, fn func(ctx context.Context, cc *grpc.ClientConn) error) error {
	var err error
	for i := 0; ctx.Err() == nil; i++ {
		conns := env.MemberConns()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = fn(cctx, conns[i%len(conns)])
		cancel()
		if err == nil {
			return nil
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
}

func cronSetup(ctx context.Context, env *Env) error {
	err := retry(ctx, env, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := raftqv1.NewQueuesClient(cc).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: CronQueue,
			Policy: &raftqv1.QueuePolicy{VisibilityTimeoutMs: 5000, MaxReceiveCount: 1000, DedupWindowMs: 600_000}})
		return err
	})
	if err != nil {
		return fmt.Errorf("create queue %s: %w", CronQueue, err)
	}
	for _, s := range cronSchedules {
		err := retry(ctx, env, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := raftqv1.NewSchedulesClient(cc).CreateSchedule(ctx, &raftqv1.CreateScheduleRequest{Schedule: s})
			return err
		})
		if err != nil {
			return fmt.Errorf("create schedule %s: %w", s.GetName(), err)
		}
	}
	return nil
}

// cronConsumer receives and acks. Every receive is recorded, so a
// redelivery after a lost ack shows the same message again, which the
// checker tells from a second fire by its message id.
func cronConsumer(ctx context.Context, c *Client) {
	for ctx.Err() == nil {
		cronReceive(ctx, c, 500*time.Millisecond)
	}
}

// cronReceive takes one batch, records it and acks it; it reports how
// many messages it received.
func cronReceive(ctx context.Context, c *Client, wait time.Duration) int {
	cc := c.env.Conns[c.node()]
	cctx, cancel := context.WithTimeout(ctx, c.env.CallTimeout+wait)
	defer cancel()
	resp, err := raftqv1.NewMessagesClient(cc).Receive(cctx, &raftqv1.ReceiveRequest{Queue: CronQueue, MaxMessages: 50,
		WaitMs: wait.Milliseconds(), VisibilityTimeoutMs: 5000})
	if err != nil {
		sleep(ctx, 100*time.Millisecond)
		return 0
	}
	var receipts []string
	for _, m := range resp.GetMessages() {
		receipts = append(receipts, m.GetReceipt())
		cr := &history.Cron{Schedule: m.GetAttributes()[meta.CronAttrSchedule]}
		cr.SlotMs, _ = strconv.ParseInt(m.GetAttributes()[meta.CronAttrSlot], 10, 64)
		cr.Trigger, _ = strconv.ParseUint(m.GetAttributes()[meta.CronAttrTrigger], 10, 64)
		c.env.Rec.Add(history.Op{Type: history.OK, F: history.FCron, Process: c.proc, Queue: CronQueue, MessageID: m.GetMessageId(), Cron: cr})
	}
	if len(receipts) > 0 {
		_, _ = raftqv1.NewMessagesClient(cc).Ack(cctx, &raftqv1.AckRequest{Receipts: receipts})
	}
	return len(resp.GetMessages())
}

// cronTrigger triggers a schedule every 3-7 s; a trigger whose answer is
// lost may or may not have been recorded, which the checker allows (it
// counts the triggers the meta log says fired).
func cronTrigger(ctx context.Context, c *Client) {
	for sleep(ctx, 3*time.Second+time.Duration(c.rng.IntN(4000))*time.Millisecond) {
		s := cronSchedules[c.rng.IntN(len(cronSchedules))]
		cctx, cancel := context.WithTimeout(ctx, c.env.CallTimeout)
		_, _ = raftqv1.NewSchedulesClient(c.env.Conns[c.node()]).TriggerSchedule(cctx, &raftqv1.TriggerScheduleRequest{Name: s.GetName()})
		cancel()
	}
}

// cronFinish pauses the schedules, waits for the last pass to be
// recorded, records each schedule as the most advanced member knows it,
// and drains the queue.
func cronFinish(ctx context.Context, env *Env, c *Client) {
	for _, s := range cronSchedules {
		err := retry(ctx, env, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := raftqv1.NewSchedulesClient(cc).PauseSchedule(ctx, &raftqv1.PauseScheduleRequest{Name: s.GetName()})
			return err
		})
		if err != nil {
			env.Rec.Add(history.Op{Type: history.Fail, F: history.FCronState, Error: err.Error()})
			return
		}
	}
	sleep(ctx, 8*time.Second) // a pass in flight sends for at most 5 s, then records
	for _, s := range cronSchedules {
		var best *raftqv1.ScheduleInfo
		for _, cc := range env.MemberConns() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := raftqv1.NewSchedulesClient(cc).GetSchedule(cctx, &raftqv1.GetScheduleRequest{Name: s.GetName()})
			cancel()
			if err == nil && (best == nil || got.GetLastSlotMs() > best.GetLastSlotMs() ||
				got.GetLastSlotMs() == best.GetLastSlotMs() && got.GetTriggersFired() > best.GetTriggersFired()) {
				best = got
			}
		}
		if best == nil {
			env.Rec.Add(history.Op{Type: history.Fail, F: history.FCronState, Error: "no member answered for schedule " + s.GetName()})
			continue
		}
		misfire := "fire-once"
		switch best.GetMisfire() {
		case raftqv1.MisfirePolicy_MISFIRE_POLICY_SKIP:
			misfire = "skip"
		case raftqv1.MisfirePolicy_MISFIRE_POLICY_CATCH_UP:
			misfire = "catch-up"
		}
		env.Rec.Add(history.Op{Type: history.OK, F: history.FCronState, Cron: &history.Cron{
			Schedule: best.GetName(), EveryMs: 1000, CreatedMs: best.GetCreatedMs(), Misfire: misfire, CatchUpMax: best.GetCatchUpMax(),
			LastSlotMs: best.GetLastSlotMs(), Fired: best.GetFired(), Skipped: best.GetSkipped(), TriggersFired: best.GetTriggersFired()}})
	}
	for empty := 0; empty < 4 && ctx.Err() == nil; {
		if cronReceive(ctx, c, 500*time.Millisecond) == 0 {
			empty++
		} else {
			empty = 0
		}
	}
}
