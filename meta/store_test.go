package meta

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// mustOpenSingle opens a one-voter meta group in dir over an in-memory
// transport (the raftmux transport is tested in its own package) and waits
// until it leads.
func mustOpenSingle(t *testing.T, dir string, bootstrap bool) *Store {
	t.Helper()
	addr, tr := raft.NewInmemTransport("")
	s, err := Open(Config{NodeID: "m1", Dir: dir, Transport: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if bootstrap {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Bootstrap(ctx, []raft.Server{{Suffrage: raft.Voter, ID: "m1", Address: addr}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func waitLeader(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStore_WritesErrorsAndChanges(t *testing.T) {
	s := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changes, stop := s.Changes()
	defer stop()
	drain := func() {
		for {
			select {
			case <-changes:
			default:
				return
			}
		}
	}
	drain()

	q, err := s.CreateQueue(ctx, "jobs", &fsmpb.QueuePolicy{VisibilityTimeoutMs: 1500})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(2 * time.Second):
		t.Fatal("no change notification after a create")
	}
	if q.CreatedMs == 0 || q.Policy.GetVisibilityTimeoutMs() != 1500 {
		t.Fatalf("created %v", q)
	}
	// Defaults are filled before proposing, so an empty field and its
	// default are the same policy.
	norm := q.Policy
	if again, err := s.CreateQueue(ctx, "jobs", norm); err != nil || again.CreatedMs != q.CreatedMs {
		t.Fatalf("create with the normalized policy: %v %v", again, err)
	}
	for _, tc := range []struct {
		name string
		err  error
		do   func() error
	}{
		{"different policy", ErrExists, func() error {
			_, err := s.CreateQueue(ctx, "jobs", &fsmpb.QueuePolicy{VisibilityTimeoutMs: 9000})
			return err
		}},
		{"bad name", ErrInvalid, func() error { _, err := s.CreateQueue(ctx, "no spaces", nil); return err }},
		{"update missing", ErrNotFound, func() error { _, err := s.UpdateQueue(ctx, "nope", nil); return err }},
		{"delete missing", ErrNotFound, func() error { return s.DeleteQueue(ctx, "nope") }},
		{"cancelled context", context.Canceled, func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := s.CreateQueue(c, "late", nil)
			return err
		}},
	} {
		if err := tc.do(); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
		}
	}

	m, err := s.PlaceShards(ctx, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Count != 8 || len(m.Replicas[7]) != 1 || m.RaftAddrs["m1"] == "" {
		t.Fatalf("map %+v", m)
	}
	if _, err := s.PlaceShards(ctx, 4, 3); !errors.Is(err, ErrAlreadyPlaced) {
		t.Fatalf("second placement: %v, want ErrAlreadyPlaced", err)
	}
	if got := s.Queues(); len(got) != 1 || got[0].Name != "jobs" {
		t.Fatalf("queues %v", got)
	}
}

// After a snapshot, a restarted replica has its state before any leader
// contact, and bootstrapping again is refused.
func TestStore_RestartFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := mustOpenSingle(t, dir, true)
	waitLeader(t, s)
	if _, err := s.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PlaceShards(ctx, 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	applied := s.AppliedIndex()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	r := mustOpenSingle(t, dir, false)
	if !r.HasState() {
		t.Fatal("restarted store reports no state")
	}
	if _, ok := r.Queue("jobs"); !ok || !r.ShardMap().Placed() || r.AppliedIndex() != applied {
		t.Fatalf("after restart: queue %v, map %+v, applied %d want %d", r.Queues(), r.ShardMap(), r.AppliedIndex(), applied)
	}
	if err := r.Bootstrap(ctx, []raft.Server{{Suffrage: raft.Voter, ID: "m1", Address: "x"}}); !errors.Is(err, raft.ErrCantBootstrap) {
		t.Fatalf("bootstrap over state: %v, want ErrCantBootstrap", err)
	}
}

// What a user meets when creating and updating queues: each refusal says
// why once, in words a client can show as they are.
func TestStore_QueueRefusals(t *testing.T) {
	s := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.CreateQueue(ctx, "jobs", nil); err != nil {
		t.Fatal(err)
	}
	fifo := &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_FIFO}
	for _, tc := range []struct {
		name   string
		do     func() error
		kind   error
		reason string
	}{
		{"different policy", func() error {
			_, err := s.CreateQueue(ctx, "jobs", &fsmpb.QueuePolicy{VisibilityTimeoutMs: 9000})
			return err
		}, ErrExists, `queue "jobs" exists with a different policy`},
		{"mode change", func() error { _, err := s.UpdateQueue(ctx, "jobs", fifo); return err },
			ErrInvalid, `queue "jobs" is standard and a queue's mode cannot change; create a new queue for FIFO delivery`},
		{"dot", func() error { _, err := s.CreateQueue(ctx, "..", nil); return err },
			ErrInvalid, `queue name ".." starts with '.'; start it with a letter, a digit or '_'`},
		{"dash", func() error { _, err := s.CreateQueue(ctx, "-dash", nil); return err },
			ErrInvalid, `queue name "-dash" starts with '-'; start it with a letter, a digit or '_'`},
		{"update missing", func() error { _, err := s.UpdateQueue(ctx, "nope", nil); return err },
			ErrNotFound, `queue "nope" not found`},
	} {
		err := tc.do()
		var re *RefusedError
		if !errors.Is(err, tc.kind) || !errors.As(err, &re) || re.Reason != tc.reason {
			t.Errorf("%s: %v; want %v with reason %q", tc.name, err, tc.kind, tc.reason)
		}
	}
	if q, ok := s.Queue("jobs"); !ok || q.Policy.GetMode() != fsmpb.QueueMode_QUEUE_MODE_STANDARD {
		t.Fatalf("jobs after a refused mode change: %v", q)
	}
	// An update that keeps the mode goes through.
	if q, err := s.UpdateQueue(ctx, "jobs", &fsmpb.QueuePolicy{VisibilityTimeoutMs: 9000}); err != nil || q.Policy.GetVisibilityTimeoutMs() != 9000 {
		t.Fatalf("update keeping the mode: %v, %v", q, err)
	}
}
