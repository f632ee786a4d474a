package systest

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/meta"
)

// TestCluster_CronAcrossMetaLeaderKill: an "@every 1s" schedule fires
// while its meta leader is killed with SIGKILL and later restarted. Every
// slot from the first to the last recorded one arrives exactly once (the
// new leader resends the slot its predecessor may have sent unrecorded,
// and the shard deduplicates it), none is skipped, and a manual trigger
// sent before the kill arrives once.
func TestCluster_CronAcrossMetaLeaderKill(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 2})
	mustCreateQueue(t, c, "cron-jobs", nil)
	ctx := ctxT(t, 50*time.Second)
	sched := raftqv1.NewSchedulesClient(c.Conn(0))
	created, err := sched.CreateSchedule(ctx, &raftqv1.CreateScheduleRequest{Schedule: &raftqv1.ScheduleInfo{
		Name: "tick", Spec: "@every 1s", Queue: "cron-jobs", Body: []byte("{{slot_ms}}"),
		Misfire: raftqv1.MisfirePolicy_MISFIRE_POLICY_CATCH_UP, CatchUpMax: 100,
	}})
	if err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	if _, err := sched.TriggerSchedule(ctx, &raftqv1.TriggerScheduleRequest{Name: "tick"}); err != nil {
		t.Fatalf("trigger: %v", err)
	}
	time.Sleep(4 * time.Second)

	st, err := raftqv1.NewClusterClient(c.Conn(0)).Status(ctx, &raftqv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	leader := slices.IndexFunc(c.Nodes, func(n *testcluster.Node) bool { return n.ID == st.GetMetaLeaderId() })
	if leader < 0 {
		t.Fatalf("no meta leader in %v", st)
	}
	killedAt := time.Now()
	t.Logf("kill -9 meta leader %s", c.Nodes[leader].ID)
	c.Kill(leader)
	time.Sleep(6 * time.Second)
	c.Restart(leader)
	time.Sleep(3 * time.Second)

	// Stop firing, let the last pass settle, then read what was recorded.
	other := (leader + 1) % len(c.Nodes)
	sched = raftqv1.NewSchedulesClient(c.Conn(other))
	for {
		_, err := sched.PauseSchedule(ctx, &raftqv1.PauseScheduleRequest{Name: "tick"})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("pause: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	got, err := sched.GetSchedule(ctx, &raftqv1.GetScheduleRequest{Name: "tick"})
	if err != nil {
		t.Fatal(err)
	}

	slots := map[int64]int{}
	triggers := 0
	empty := 0
	for empty < 3 {
		resp, err := msgs(c, other).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "cron-jobs", MaxMessages: 100, WaitMs: 500})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(resp.GetMessages()) == 0 {
			empty++
			continue
		}
		empty = 0
		var receipts []string
		for _, m := range resp.GetMessages() {
			receipts = append(receipts, m.GetReceipt())
			if m.GetAttributes()[meta.CronAttrTrigger] != "" {
				triggers++
				continue
			}
			ms, err := strconv.ParseInt(m.GetAttributes()[meta.CronAttrSlot], 10, 64)
			if err != nil || string(m.GetBody()) != strconv.FormatInt(ms, 10) {
				t.Fatalf("message %v: slot attribute and body disagree", m)
			}
			slots[ms]++
		}
		if _, err := msgs(c, other).Ack(ctx, &raftqv1.AckRequest{Receipts: receipts}); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}

	first, last := created.GetCreatedMs()+1000, got.GetLastSlotMs()
	if last < killedAt.UnixMilli()+3000 {
		t.Fatalf("last slot %d: the schedule stopped firing at the kill (%d)", last, killedAt.UnixMilli())
	}
	for s := first; s <= last; s += 1000 {
		if slots[s] != 1 {
			t.Errorf("slot %d arrived %d times", s, slots[s])
		}
		delete(slots, s)
	}
	if len(slots) > 0 {
		t.Errorf("slots outside the schedule's or after the last recorded: %v", slots)
	}
	if n := uint64((last-first)/1000 + 1); got.GetFired() != n || got.GetSkipped() != 0 {
		t.Errorf("recorded fired %d skipped %d, want %d and 0", got.GetFired(), got.GetSkipped(), n)
	}
	if triggers != 1 || got.GetTriggersFired() != 1 {
		t.Errorf("trigger arrived %d times, recorded %d, want 1", triggers, got.GetTriggersFired())
	}
	t.Logf("%d slots from %d to %d, each once, across the kill", (last-first)/1000+1, first, last)
}
