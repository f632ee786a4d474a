package meta

import (
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

func pauseCmd(name string, paused bool) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_PauseQueue{PauseQueue: &metapb.PauseQueue{Name: name, Paused: paused}}}
}

// The pause is recorded beside the policy: an update keeps it, a snapshot
// carries it, and the shards' policy says it.
func TestFSM_PauseQueue(t *testing.T) {
	f := NewFSM(nil)
	if r := applyAt(t, f, 1, 100, pauseCmd("a", true)); r.GetCode() != metapb.Code_CODE_NOT_FOUND {
		t.Fatalf("pause of a missing queue: %v", r)
	}
	applyAt(t, f, 2, 100, createCmd("a", policy(1000)))
	if r := applyAt(t, f, 3, 200, pauseCmd("a", true)); r.GetCode() != metapb.Code_CODE_OK || !r.GetQueue().GetPaused() || r.GetQueue().GetUpdatedMs() != 200 {
		t.Fatalf("pause: %v", r)
	}
	// Pausing again changes nothing, not even the update time.
	if r := applyAt(t, f, 4, 300, pauseCmd("a", true)); !r.GetQueue().GetPaused() || r.GetQueue().GetUpdatedMs() != 200 {
		t.Fatalf("second pause: %v", r)
	}
	applyAt(t, f, 5, 400, updateCmd("a", policy(2000)))
	q, _ := f.Queue("a")
	if !q.GetPaused() || q.GetPolicy().GetVisibilityTimeoutMs() != 2000 {
		t.Fatalf("after an update: %v, want the new policy and still paused", q)
	}
	if sp := shardPolicy(q, nil, 3); !sp.GetPaused() {
		t.Fatalf("shard policy of a paused queue: %v", sp)
	}
	if q.GetPolicy().GetPaused() {
		t.Fatal("the pause leaked into the recorded policy")
	}
	g := restoredCopy(t, f)
	if rq, _ := g.Queue("a"); !rq.GetPaused() {
		t.Fatalf("restored queue %v lost its pause", rq)
	}
	applyAt(t, f, 6, 500, pauseCmd("a", false))
	q, _ = f.Queue("a")
	if q.GetPaused() || shardPolicy(q, nil, 3).GetPaused() {
		t.Fatalf("after resume: %v", q)
	}
}

// A policy given to create or update never carries a pause: only
// PauseQueue sets it.
func TestNormalizeDropsPause(t *testing.T) {
	np, err := normalize("a", &fsmpb.QueuePolicy{Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	if np.GetPaused() {
		t.Fatal("normalize kept a pause from a user's policy")
	}
}

func TestPauseQueueNeedsFormat7(t *testing.T) {
	if got := CommandFormat(pauseCmd("a", true)); got != 7 {
		t.Fatalf("pause_queue format %d, want 7", got)
	}
	if got := CommandFormat(pauseCmd("a", false)); got != 7 {
		t.Fatalf("resume (pause_queue) format %d, want 7", got)
	}
}
