package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
)

func TestPauseQueueValidation(t *testing.T) {
	qs := raftqv1.NewQueuesClient(servePlaced(t))
	pause := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := qs.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: name})
			return err
		}
	}
	resume := func(name string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := qs.ResumeQueue(ctx, &raftqv1.ResumeQueueRequest{Name: name})
			return err
		}
	}
	runChecks(t, []check{
		{"pause without a name", pause(""), codes.InvalidArgument, "queue name is empty"},
		{"pause of a bad name", pause("a b"), codes.InvalidArgument, "outside [A-Za-z0-9._-]"},
		{"pause of a name too long", pause(strings.Repeat("q", fsm.MaxQueueNameLen+1)), codes.InvalidArgument, "limit 128"},
		{"resume without a name", resume(""), codes.InvalidArgument, "queue name is empty"},
		// The meta replica here has recorded no node's log format, as in a
		// rolling upgrade from a release before pauses: refused, nothing
		// written.
		{"pause before every node runs format 7", pause("small"), codes.FailedPrecondition, "needs log format 7"},
		{"resume before every node runs format 7", resume("small"), codes.FailedPrecondition, "needs log format 7"},
	})
}

// Once every node runs format 7, a pause of a missing queue is NOT_FOUND,
// and one of a queue is recorded in meta before the shards are told: with
// no shard leader here, the call says so and that a retry is safe.
func TestPauseQueueRecordsInMeta(t *testing.T) {
	ms := leadingMeta(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := ms.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	if err := ms.RecordNodeFormat(ctx, "n2", fsm.LogFormat); err != nil {
		t.Fatal(err)
	}
	node := &startingNode{meta: ms}
	node.count.Store(2)
	qs := raftqv1.NewQueuesClient(serve(t, node))
	_, err := qs.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: "nosuch"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("pause of a missing queue: %v, want NOT_FOUND", err)
	}
	_, err = qs.PauseQueue(ctx, &raftqv1.PauseQueueRequest{Name: "jobs"})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "retry is safe") {
		t.Fatalf("pause with no shard leader: %v, want UNAVAILABLE saying a retry is safe", err)
	}
	q, ok := ms.Queue("jobs")
	if !ok || !q.Paused {
		t.Fatalf("meta has %+v after the pause", q)
	}
	if p := ms.ShardPolicy(q); !p.GetPaused() {
		t.Fatalf("the policy pushed to shards %v is not paused", p)
	}
}
