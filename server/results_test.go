package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/wire"
)

// Ack results and WaitMessage are checked before anything is proposed or
// read: a request that passes reaches the leaderless shards of
// servePlaced and gets UNAVAILABLE.
func TestResultAndWaitValidation(t *testing.T) {
	msgs := raftqv1.NewMessagesClient(servePlaced(t))
	good := wire.Receipt{Shard: 1, ID: 7, Epoch: 3, Term: 2}.String()
	ack := func(receipts []string, results ...[]byte) func(context.Context) error {
		return func(ctx context.Context) error {
			resp, err := msgs.Ack(ctx, &raftqv1.AckRequest{Receipts: receipts, Results: results})
			if err != nil {
				return err
			}
			r := resp.GetResults()[0]
			return itemErr(r.GetCode(), r.GetError())
		}
	}
	wait := func(r *raftqv1.WaitMessageRequest) func(context.Context) error {
		return func(ctx context.Context) error { _, err := msgs.WaitMessage(ctx, r); return err }
	}
	id := wire.MessageID{Shard: 1, ID: 7}.String()
	runChecks(t, []check{
		{"result at the limit", ack([]string{good}, make([]byte, fsm.MaxResultBytes)), codes.Unavailable, ""},
		{"result above the limit", ack([]string{good}, make([]byte, fsm.MaxResultBytes+1)), codes.InvalidArgument, "result 0 is 65537 bytes, above the limit of 65536"},
		{"fewer results than receipts", ack([]string{good, good}, []byte("x")), codes.InvalidArgument, "1 results for 2 receipts"},
		{"more results than receipts", ack([]string{good}, []byte("x"), []byte("y")), codes.InvalidArgument, "2 results for 1 receipts"},
		{"wait on a malformed id", wait(&raftqv1.WaitMessageRequest{MessageId: "x"}), codes.InvalidArgument, ""},
		{"negative wait", wait(&raftqv1.WaitMessageRequest{MessageId: id, WaitMs: -1}), codes.InvalidArgument, "wait_ms -1"},
		{"wait too long", wait(&raftqv1.WaitMessageRequest{MessageId: id, WaitMs: MaxWaitMs + 1}), codes.InvalidArgument, "wait_ms 60001"},
		{"wait on a leaderless shard", wait(&raftqv1.WaitMessageRequest{MessageId: id, WaitMs: 100}), codes.Unavailable, ""},
	})
}

func TestPartResults(t *testing.T) {
	req := &raftqv1.AckRequest{Receipts: []string{"a", "b", "c"}, Results: [][]byte{[]byte("ra"), nil, []byte("rc")}}
	if got := partResults(req, []int{1}); got != nil {
		t.Fatalf("a part with only empty results = %q, want nil (no format 7 needed)", got)
	}
	got := partResults(req, []int{2, 0})
	if len(got) != 2 || string(got[0]) != "rc" || string(got[1]) != "ra" {
		t.Fatalf("part results = %q", got)
	}
	if partResults(&raftqv1.AckRequest{Receipts: []string{"a"}}, []int{0}) != nil {
		t.Fatal("an ack without results got some")
	}
}
