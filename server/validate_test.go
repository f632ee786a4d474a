package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
)

// servePlaced runs the real services of a node whose meta replica leads a
// one-voter group that holds the queues "small" (standard, bodies up to
// 1 KiB) and "fifo", with a map of 2 shards that have no leader anywhere.
// A request that passes validation therefore reaches the router and is
// refused UNAVAILABLE (no leader, after 200 ms); one that fails it is
// INVALID_ARGUMENT before anything is proposed.
func servePlaced(t *testing.T) *grpc.ClientConn {
	t.Helper()
	ms := leadingMeta(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for name, p := range map[string]*fsmpb.QueuePolicy{
		"small": {MaxMessageBytes: 1024},
		"fifo":  {Mode: fsmpb.QueueMode_QUEUE_MODE_FIFO},
	} {
		if _, err := ms.CreateQueue(ctx, name, p); err != nil {
			t.Fatal(err)
		}
	}
	node := &startingNode{meta: ms}
	node.count.Store(2)
	return serve(t, node)
}

// check is one request and the status it must get. want is
// codes.Unavailable for a request that passes validation (servePlaced).
type check struct {
	name string
	do   func(context.Context) error
	want codes.Code
	msg  string // a part of the status message, for refusals
}

func runChecks(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := c.do(ctx)
			st, _ := status.FromError(err)
			if st.Code() != c.want || !strings.Contains(st.Message(), c.msg) {
				t.Fatalf("%v %q, want %v containing %q", st.Code(), st.Message(), c.want, c.msg)
			}
		})
	}
}

// itemErr is a batch item's result as a status error, so batch items go
// through the same table.
func itemErr(code int32, msg string) error {
	if code == 0 {
		return nil
	}
	return status.Error(codes.Code(code), msg)
}

func attrs(n, keyLen, valLen int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		k := fmt.Sprintf("%0*d", keyLen, i)
		m[k] = strings.Repeat("v", valLen)
	}
	return m
}

func TestSendValidation(t *testing.T) {
	msgs := raftqv1.NewMessagesClient(servePlaced(t))
	send := func(r *raftqv1.SendRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := msgs.Send(ctx, r)
			return err
		}
	}
	body := func(n int) []byte { return make([]byte, n) }
	long := strings.Repeat("x", 129)
	runChecks(t, []check{
		{"no queue name", send(&raftqv1.SendRequest{Body: body(1)}), codes.InvalidArgument, "queue name is empty"},
		{"queue name with a space", send(&raftqv1.SendRequest{Queue: "a b"}), codes.InvalidArgument, "outside [A-Za-z0-9._-]"},
		{"queue name too long", send(&raftqv1.SendRequest{Queue: strings.Repeat("q", fsm.MaxQueueNameLen+1)}), codes.InvalidArgument, "limit 128"},
		{"body at the queue's limit", send(&raftqv1.SendRequest{Queue: "small", Body: body(1024)}), codes.Unavailable, ""},
		{"body over the queue's limit", send(&raftqv1.SendRequest{Queue: "small", Body: body(1025)}), codes.InvalidArgument, "body is 1025 bytes, limit 1024"},
		{"attributes at the count limit", send(&raftqv1.SendRequest{Queue: "small", Attributes: attrs(fsm.MaxAttributes, 3, 1)}), codes.Unavailable, ""},
		{"too many attributes", send(&raftqv1.SendRequest{Queue: "small", Attributes: attrs(fsm.MaxAttributes+1, 3, 1)}), codes.InvalidArgument, "65 attributes, limit 64"},
		{"empty attribute key", send(&raftqv1.SendRequest{Queue: "small", Attributes: map[string]string{"": "v"}}), codes.InvalidArgument, "attribute key is empty"},
		{"attribute key too long", send(&raftqv1.SendRequest{Queue: "small", Attributes: attrs(1, fsm.MaxAttributeKeyBytes+1, 1)}), codes.InvalidArgument, "attribute key is 129 bytes"},
		{"attributes too large", send(&raftqv1.SendRequest{Queue: "small", Attributes: attrs(2, 4, fsm.MaxAttributesBytes/2)}), codes.InvalidArgument, "attributes are"},
		{"type too long", send(&raftqv1.SendRequest{Queue: "small", Type: long}), codes.InvalidArgument, "type is 129 bytes"},
		{"group id too long", send(&raftqv1.SendRequest{Queue: "small", GroupId: long}), codes.InvalidArgument, "group id is 129 bytes"},
		{"dedup key too long", send(&raftqv1.SendRequest{Queue: "small", DedupKey: long}), codes.InvalidArgument, "dedup key is 129 bytes"},
		{"FIFO without a group", send(&raftqv1.SendRequest{Queue: "fifo"}), codes.InvalidArgument, "needs a message group id"},
		{"FIFO with a group", send(&raftqv1.SendRequest{Queue: "fifo", GroupId: "g"}), codes.Unavailable, ""},
		{"highest priority", send(&raftqv1.SendRequest{Queue: "small", Priority: fsm.MaxPriority}), codes.Unavailable, ""},
		{"priority above the highest", send(&raftqv1.SendRequest{Queue: "small", Priority: fsm.MaxPriority + 1}), codes.InvalidArgument, "priority is 10, allowed 0..9"},
		{"negative delay", send(&raftqv1.SendRequest{Queue: "small", DelayMs: -1}), codes.InvalidArgument, "must not be negative"},
		{"longest delay", send(&raftqv1.SendRequest{Queue: "small", DelayMs: fsm.MaxDelayMs}), codes.Unavailable, ""},
		{"delay too long", send(&raftqv1.SendRequest{Queue: "small", DelayMs: fsm.MaxDelayMs + 1}), codes.InvalidArgument, "delay_ms is"},
		{"negative run_at_ms", send(&raftqv1.SendRequest{Queue: "small", RunAtMs: -5}), codes.InvalidArgument, "must not be negative"},
		// The shard's FSM applies the queue's policy when this node does
		// not know the queue; the name alone passes here.
		{"unknown queue", send(&raftqv1.SendRequest{Queue: "other", Body: body(2048)}), codes.Unavailable, ""},
	})
}

func TestSendBatchValidation(t *testing.T) {
	msgs := raftqv1.NewMessagesClient(servePlaced(t))
	batch := func(queue string, items []*raftqv1.SendRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := msgs.SendBatch(ctx, &raftqv1.SendBatchRequest{Queue: queue, Messages: items})
			return err
		}
	}
	// item runs a batch of a good item and a second one and answers the
	// second one's result; the good one must be refused only for want of
	// a leader.
	item := func(r *raftqv1.SendRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			resp, err := msgs.SendBatch(ctx, &raftqv1.SendBatchRequest{Queue: "small", Messages: []*raftqv1.SendRequest{{Body: []byte("ok")}, r}})
			if err != nil {
				return fmt.Errorf("batch refused whole: %w", err)
			}
			res := resp.GetResults()
			if len(res) != 2 {
				return status.Errorf(codes.Internal, "%d results for 2 items", len(res))
			}
			if c := codes.Code(res[0].GetCode()); c != codes.Unavailable {
				return status.Errorf(codes.Internal, "the good item got %v %q", c, res[0].GetError())
			}
			return itemErr(res[1].GetCode(), res[1].GetError())
		}
	}
	many := make([]*raftqv1.SendRequest, fsm.MaxEnqueueBatch+1)
	for i := range many {
		many[i] = &raftqv1.SendRequest{}
	}
	runChecks(t, []check{
		{"empty batch", batch("small", nil), codes.InvalidArgument, "1 to 1000 messages, got 0"},
		{"batch over the limit", batch("small", many), codes.InvalidArgument, "got 1001"},
		{"bad queue name", batch("-x y", many[:1]), codes.InvalidArgument, "outside [A-Za-z0-9._-]"},
		{"item body too large", item(&raftqv1.SendRequest{Body: make([]byte, 1025)}), codes.InvalidArgument, "body is 1025 bytes"},
		{"item priority too high", item(&raftqv1.SendRequest{Priority: 10}), codes.InvalidArgument, "priority is 10"},
		{"item negative delay", item(&raftqv1.SendRequest{DelayMs: -1}), codes.InvalidArgument, "must not be negative"},
		{"good item", item(&raftqv1.SendRequest{Body: []byte("also ok")}), codes.Unavailable, ""},
	})
}

func TestReceiveValidation(t *testing.T) {
	msgs := raftqv1.NewMessagesClient(servePlaced(t))
	recv := func(r *raftqv1.ReceiveRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := msgs.Receive(ctx, r)
			return err
		}
	}
	runChecks(t, []check{
		{"no queue name", recv(&raftqv1.ReceiveRequest{}), codes.InvalidArgument, "queue name is empty"},
		{"most messages", recv(&raftqv1.ReceiveRequest{Queue: "small", MaxMessages: fsm.MaxReceiveBatch}), codes.Unavailable, ""},
		{"too many messages", recv(&raftqv1.ReceiveRequest{Queue: "small", MaxMessages: fsm.MaxReceiveBatch + 1}), codes.InvalidArgument, "max_messages 1001 above the limit 1000"},
		{"negative wait", recv(&raftqv1.ReceiveRequest{Queue: "small", WaitMs: -1}), codes.InvalidArgument, "wait_ms -1 is outside 0..20000"},
		{"wait too long", recv(&raftqv1.ReceiveRequest{Queue: "small", WaitMs: 20001}), codes.InvalidArgument, "wait_ms 20001"},
		// Converted to a Duration first, this overflowed into a short wait.
		{"wait overflowing a duration", recv(&raftqv1.ReceiveRequest{Queue: "small", WaitMs: math.MaxInt64}), codes.InvalidArgument, "wait_ms"},
		{"negative visibility", recv(&raftqv1.ReceiveRequest{Queue: "small", VisibilityTimeoutMs: -1}), codes.InvalidArgument, "visibility_timeout_ms -1"},
		{"visibility too long", recv(&raftqv1.ReceiveRequest{Queue: "small", VisibilityTimeoutMs: fsm.MaxVisibilityMs + 1}), codes.InvalidArgument, "visibility_timeout_ms"},
	})
}

func TestReceiptValidation(t *testing.T) {
	msgs := raftqv1.NewMessagesClient(servePlaced(t))
	good := wire.Receipt{Shard: 1, ID: 7, Epoch: 3, Term: 2}.String()
	beyond := wire.Receipt{Shard: 2, ID: 7, Epoch: 3, Term: 2}.String()
	ack := func(receipts ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			resp, err := msgs.Ack(ctx, &raftqv1.AckRequest{Receipts: receipts})
			if err != nil {
				return err
			}
			// The last receipt's result; the others are good ones.
			res := resp.GetResults()
			if len(res) != len(receipts) {
				return status.Errorf(codes.Internal, "%d results for %d receipts", len(res), len(receipts))
			}
			for _, r := range res[:len(res)-1] {
				if codes.Code(r.GetCode()) != codes.Unavailable {
					return status.Errorf(codes.Internal, "a good receipt got %v %q", codes.Code(r.GetCode()), r.GetError())
				}
			}
			last := res[len(res)-1]
			return itemErr(last.GetCode(), last.GetError())
		}
	}
	many := make([]string, fsm.MaxReceiveBatch+1)
	for i := range many {
		many[i] = good
	}
	nack := func(r *raftqv1.NackRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := msgs.Nack(ctx, r); return err }
	}
	extend := func(r *raftqv1.ExtendLeaseRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := msgs.ExtendLease(ctx, r); return err }
	}
	dead := func(r *raftqv1.DeadLetterRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := msgs.DeadLetter(ctx, r); return err }
	}
	snooze := func(r *raftqv1.SnoozeRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := msgs.Snooze(ctx, r); return err }
	}
	get := func(id string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := msgs.GetMessage(ctx, &raftqv1.GetMessageRequest{MessageId: id})
			return err
		}
	}
	cancelMsg := func(id string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := msgs.CancelMessage(ctx, &raftqv1.CancelMessageRequest{MessageId: id})
			return err
		}
	}
	longErr := strings.Repeat("e", fsm.MaxErrorLen+1)
	runChecks(t, []check{
		{"ack of nothing", ack(), codes.InvalidArgument, "1 to 1000 receipts, got 0"},
		{"ack of too many", ack(many...), codes.InvalidArgument, "got 1001"},
		{"ack of a good receipt", ack(good), codes.Unavailable, ""},
		{"ack of a garbled receipt", ack(good, "not-a-receipt"), codes.InvalidArgument, ""},
		{"ack of a receipt beyond the map", ack(good, beyond), codes.InvalidArgument, "receipt names shard 2, the cluster has 2"},
		{"nack of a garbled receipt", nack(&raftqv1.NackRequest{Receipt: "zz"}), codes.InvalidArgument, ""},
		{"nack of an empty receipt", nack(&raftqv1.NackRequest{}), codes.InvalidArgument, ""},
		{"nack of a receipt beyond the map", nack(&raftqv1.NackRequest{Receipt: beyond}), codes.InvalidArgument, "receipt names shard 2"},
		{"nack with the longest delay", nack(&raftqv1.NackRequest{Receipt: good, HasDelay: true, DelayMs: fsm.MaxDelayMs}), codes.Unavailable, ""},
		{"nack with a negative delay", nack(&raftqv1.NackRequest{Receipt: good, HasDelay: true, DelayMs: -1}), codes.InvalidArgument, "delay_ms -1"},
		{"nack with a delay too long", nack(&raftqv1.NackRequest{Receipt: good, HasDelay: true, DelayMs: fsm.MaxDelayMs + 1}), codes.InvalidArgument, "delay_ms"},
		{"nack with an error too long", nack(&raftqv1.NackRequest{Receipt: good, Error: longErr}), codes.InvalidArgument, "error text of 1025 bytes above the limit 1024"},
		{"snooze of a garbled receipt", snooze(&raftqv1.SnoozeRequest{Receipt: "zz"}), codes.InvalidArgument, ""},
		{"snooze of a receipt beyond the map", snooze(&raftqv1.SnoozeRequest{Receipt: beyond}), codes.InvalidArgument, "receipt names shard 2"},
		{"snooze with the longest delay", snooze(&raftqv1.SnoozeRequest{Receipt: good, DelayMs: fsm.MaxDelayMs}), codes.Unavailable, ""},
		{"snooze with a negative delay", snooze(&raftqv1.SnoozeRequest{Receipt: good, DelayMs: -1}), codes.InvalidArgument, "delay_ms -1"},
		{"snooze with a delay too long", snooze(&raftqv1.SnoozeRequest{Receipt: good, DelayMs: fsm.MaxDelayMs + 1}), codes.InvalidArgument, "delay_ms"},
		{"snooze with a reason too long", snooze(&raftqv1.SnoozeRequest{Receipt: good, Reason: longErr}), codes.InvalidArgument, "reason of 1025 bytes above the limit 1024"},
		{"extend to nothing", extend(&raftqv1.ExtendLeaseRequest{Receipt: good}), codes.InvalidArgument, "visibility_timeout_ms must be within 1.."},
		{"extend too far", extend(&raftqv1.ExtendLeaseRequest{Receipt: good, VisibilityTimeoutMs: fsm.MaxVisibilityMs + 1}), codes.InvalidArgument, "visibility_timeout_ms must be within"},
		{"extend a garbled receipt", extend(&raftqv1.ExtendLeaseRequest{Receipt: "x", VisibilityTimeoutMs: 1000}), codes.InvalidArgument, ""},
		{"extend", extend(&raftqv1.ExtendLeaseRequest{Receipt: good, VisibilityTimeoutMs: fsm.MaxVisibilityMs}), codes.Unavailable, ""},
		{"dead-letter with an error too long", dead(&raftqv1.DeadLetterRequest{Receipt: good, Error: longErr}), codes.InvalidArgument, "error text of 1025 bytes"},
		{"dead-letter a garbled receipt", dead(&raftqv1.DeadLetterRequest{Receipt: "x"}), codes.InvalidArgument, ""},
		{"get a garbled id", get("nope"), codes.InvalidArgument, ""},
		{"get an id beyond the map", get(wire.MessageID{Shard: 9, ID: 1}.String()), codes.InvalidArgument, "message id names shard 9, the cluster has 2"},
		{"get", get(wire.MessageID{Shard: 1, ID: 1}.String()), codes.Unavailable, ""},
		{"cancel a garbled id", cancelMsg(""), codes.InvalidArgument, ""},
	})
}

func TestQueueAndDeadLetterValidation(t *testing.T) {
	cc := servePlaced(t)
	qs := raftqv1.NewQueuesClient(cc)
	dlq := raftqv1.NewDeadLettersClient(cc)
	create := func(name string, p *raftqv1.QueuePolicy) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := qs.CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: name, Policy: p})
			return err
		}
	}
	update := func(name string, p *raftqv1.QueuePolicy) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := qs.UpdateQueue(ctx, &raftqv1.UpdateQueueRequest{Name: name, Policy: p})
			return err
		}
	}
	listDead := func(r *raftqv1.ListDeadRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := dlq.ListDead(ctx, r); return err }
	}
	redrive := func(r *raftqv1.RedriveRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := dlq.Redrive(ctx, r); return err }
	}
	discardDead := func(r *raftqv1.DiscardRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := dlq.Discard(ctx, r); return err }
	}
	runChecks(t, []check{
		{"create a queue named '-x'", create("-x", nil), codes.InvalidArgument, "starts with '-'"},
		{"create with no name", create("", nil), codes.InvalidArgument, "queue name is empty"},
		{"create with an unknown mode", create("q", &raftqv1.QueuePolicy{Mode: 7}), codes.InvalidArgument, "unknown queue mode 7"},
		{"create with visibility too long", create("q", &raftqv1.QueuePolicy{VisibilityTimeoutMs: fsm.MaxVisibilityMs + 1}), codes.InvalidArgument, "visibility_timeout_ms is"},
		{"create with backoff max below base", create("q", &raftqv1.QueuePolicy{BackoffBaseMs: 2000, BackoffMaxMs: 1000}), codes.InvalidArgument, "backoff_max_ms 1000 is below backoff_base_ms 2000"},
		{"create with a byte cap below one body", create("q", &raftqv1.QueuePolicy{MaxMessageBytes: 1024, MaxBytesPerShard: 1000}), codes.InvalidArgument, "max_bytes_per_shard 1000 is below max_message_bytes 1024"},
		{"create again with another policy", create("small", &raftqv1.QueuePolicy{MaxMessageBytes: 2048}), codes.AlreadyExists, ""},
		{"update with no policy", update("small", nil), codes.InvalidArgument, "policy is required"},
		{"update a missing queue", update("missing", &raftqv1.QueuePolicy{}), codes.NotFound, ""},
		{"update the mode", update("small", &raftqv1.QueuePolicy{Mode: raftqv1.QueueMode_QUEUE_MODE_FIFO}), codes.InvalidArgument, "a queue's mode cannot change"},
		{"get a missing queue", func(ctx context.Context) error {
			_, err := qs.GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "missing"})
			return err
		}, codes.NotFound, `queue "missing" not found`},
		{"delete a bad name", func(ctx context.Context) error {
			_, err := qs.DeleteQueue(ctx, &raftqv1.DeleteQueueRequest{Name: "a b"})
			return err
		}, codes.InvalidArgument, "outside [A-Za-z0-9._-]"},
		{"list dead of a bad name", listDead(&raftqv1.ListDeadRequest{Queue: "a b"}), codes.InvalidArgument, ""},
		{"list dead over the limit", listDead(&raftqv1.ListDeadRequest{Queue: "small", Limit: 1001}), codes.InvalidArgument, "limit 1001 above 1000"},
		{"list dead of a missing queue", listDead(&raftqv1.ListDeadRequest{Queue: "missing"}), codes.NotFound, ""},
		{"redrive too fast", redrive(&raftqv1.RedriveRequest{Queue: "small", RatePerS: 501}), codes.InvalidArgument, "rate_per_s 501 above the limit 500"},
		{"redrive a garbled id", redrive(&raftqv1.RedriveRequest{Queue: "small", MessageIds: []string{"x"}}), codes.InvalidArgument, ""},
		{"redrive an id beyond the map", redrive(&raftqv1.RedriveRequest{Queue: "small", MessageIds: []string{wire.MessageID{Shard: 4, ID: 1}.String()}}), codes.InvalidArgument, "names shard 4, the cluster has 2"},
		{"discard from a bad name", discardDead(&raftqv1.DiscardRequest{Queue: ""}), codes.InvalidArgument, "queue name is empty"},
	})
}
