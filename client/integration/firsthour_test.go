package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// What a new user meets from a real cluster when something is refused:
// each refusal has the right code and says why once, in the words a
// client shows as they are.
func TestRefusalsANewUserMeets(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1})
	cl := mustDial(t, c)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := cl.CreateQueue(ctx, "jobs", client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	msgs := raftqv1.NewMessagesClient(c.Conn(0))
	dead := raftqv1.NewDeadLettersClient(c.Conn(0))
	queues := raftqv1.NewQueuesClient(c.Conn(0))
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		// 2^62 ms overflowed time.Duration and was taken as no wait.
		{"huge wait", func() error {
			_, err := msgs.Receive(ctx, &raftqv1.ReceiveRequest{Queue: "jobs", WaitMs: 1 << 62})
			return err
		}, codes.InvalidArgument, "wait_ms 4611686018427387904 is outside 0..20000 (20s)"},
		{"dlq of a missing queue", func() error {
			_, err := dead.ListDead(ctx, &raftqv1.ListDeadRequest{Queue: "nosuch"})
			return err
		}, codes.NotFound, `queue "nosuch" not found`},
		{"send to a missing queue", func() error {
			_, err := msgs.Send(ctx, &raftqv1.SendRequest{Queue: "nosuch", Body: []byte("x")})
			return err
		}, codes.NotFound, `queue "nosuch" not found`},
		{"name starting with a dash", func() error {
			_, err := queues.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "-dash"})
			return err
		}, codes.InvalidArgument, `queue name "-dash" starts with '-'; start it with a letter, a digit or '_'`},
		{"non-ASCII name", func() error {
			_, err := queues.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "ünïcødé"})
			return err
		}, codes.InvalidArgument, `queue name "ünïcødé" has character 'ü' outside [A-Za-z0-9._-]`},
	} {
		err := tc.call()
		if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: %v; want %v %q", tc.name, err, tc.code, tc.msg)
		}
	}
	if _, err := cl.CreateQueue(ctx, "jobs", client.QueueOptions{Visibility: time.Minute}); !errors.Is(err, client.ErrExists) ||
		!strings.HasSuffix(err.Error(), `: queue "jobs" exists with a different policy`) || strings.Count(err.Error(), "different policy") != 1 {
		t.Errorf("create with another policy: %v", err)
	}
	if _, err := cl.UpdateQueue(ctx, "jobs", client.QueueOptions{FIFO: true}); !errors.Is(err, client.ErrInvalid) ||
		!strings.Contains(err.Error(), `queue "jobs" is standard and a queue's mode cannot change`) {
		t.Errorf("update to FIFO: %v", err)
	}
	if q, err := cl.GetQueue(ctx, "jobs"); err != nil || q.Options.FIFO {
		t.Errorf("jobs after a refused mode change: %+v, %v", q, err)
	}
	// A cancel's refusal names the message as clients know it.
	r, err := cl.Send(ctx, "jobs", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := cl.Receive(ctx, "jobs", client.ReceiveOptions{Wait: 5 * time.Second})
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	if err := cl.Ack(ctx, ms[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if err := cl.Cancel(ctx, r.ID); !errors.Is(err, client.ErrStaleReceipt) ||
		!strings.HasSuffix(err.Error(), "message "+r.ID+": it is acked; only ready or delayed messages can be cancelled") {
		t.Errorf("cancel of an acked message: %v", err)
	}
}

// BlockedGroups counts FIFO groups with a message in flight; a group
// whose first message is delayed is not blocked.
func TestBlockedGroupsCountsGroupsInFlight(t *testing.T) {
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1})
	cl := mustDial(t, c)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := cl.CreateQueue(ctx, "f", client.QueueOptions{FIFO: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send(ctx, "f", []byte("later"), client.Group("a"), client.Delay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Send(ctx, "f", []byte("now"), client.Group("b")); err != nil {
		t.Fatal(err)
	}
	if st, err := cl.Stats(ctx, "f"); err != nil || st.BlockedGroups != 0 || st.Delayed != 1 {
		t.Fatalf("stats before a receive: %+v, %v; want no blocked group", st, err)
	}
	if ms, err := cl.Receive(ctx, "f", client.ReceiveOptions{Max: 10, Wait: 5 * time.Second}); err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v %v", ms, err)
	}
	if st, err := cl.Stats(ctx, "f"); err != nil || st.BlockedGroups != 1 || st.InFlight != 1 {
		t.Fatalf("stats with group b in flight: %+v, %v; want 1 blocked group", st, err)
	}
}
