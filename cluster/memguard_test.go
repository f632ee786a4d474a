package cluster

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/raftq/raftq/shard"
)

// The guard refuses sends at 60 % of the budget in live heap and takes
// them again only below 50 %, logs each change once, and with no budget
// refuses nothing.
func TestMemGuardRefusesNearTheBudget(t *testing.T) {
	var logs bytes.Buffer
	const budget = 1000 << 20
	g := newMemGuard("n1", budget, slog.New(slog.NewTextHandler(&logs, nil)))
	live := uint64(0)
	g.live = func() uint64 { return live }
	g.collect = func() {}
	step := func(l uint64) error {
		live = l
		g.check()
		return g.admitSend()
	}
	count := func(s string) int { return strings.Count(logs.String(), s) }

	if err := step(400 << 20); err != nil {
		t.Fatalf("40 %%: %v", err)
	}
	if err := step(599 << 20); err != nil || count("memory filling") != 1 {
		t.Fatalf("just under 60 %%: %v, %d warnings", err, count("memory filling"))
	}
	err := step(600 << 20)
	var full *shard.MemoryFullError
	if !errors.As(err, &full) || !errors.Is(err, shard.ErrMemoryFull) || full.Live != 600<<20 || full.Budget != budget {
		t.Fatalf("at 60 %%: %v, want a MemoryFullError naming 600 MiB of 1000 MiB", err)
	}
	if !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), "drain") {
		t.Fatalf("refusal %q does not say whose memory or what to do", err)
	}
	if err := step(550 << 20); err == nil {
		t.Fatal("55 %: accepting again above the resume mark (it would flap)")
	}
	if err := step(499 << 20); err != nil {
		t.Fatalf("under 50 %%: still refusing: %v", err)
	}
	if n := count("refusing new sends"); n != 1 {
		t.Fatalf("%d refusal log lines for one episode", n)
	}
	if u := g.state.Load(); u.Budget != budget || u.Live != 499<<20 || u.Refusing {
		t.Fatalf("state %+v", u)
	}

	none := newMemGuard("n1", 0, slog.New(slog.NewTextHandler(&logs, nil)))
	none.live = func() uint64 { return 1 << 40 }
	none.check()
	if err := none.admitSend(); err != nil {
		t.Fatalf("no budget: %v", err)
	}
}

// While refusing, a live-heap figure that no collection renewed for a
// second is measured afresh: an idle node that was drained must not go
// on refusing until its next routine collection.
func TestMemGuardMeasuresAfreshWhileRefusing(t *testing.T) {
	g := newMemGuard("n1", 1000, slog.New(slog.NewTextHandler(io.Discard, nil)))
	live, collections := uint64(700), 0
	g.live = func() uint64 { return live }
	g.collect = func() { collections++; live = 100 }
	g.check()
	if g.admitSend() == nil {
		t.Fatal("not refusing at 70 %")
	}
	g.check()
	if collections != 0 {
		t.Fatal("collected at once: a figure is stale only after a second")
	}
	g.stale = g.stale.Add(-memStaleAfter)
	g.check()
	if collections != 1 || g.admitSend() != nil {
		t.Fatalf("after a stale second: %d collections, admit %v; want 1 and accepting", collections, g.admitSend())
	}
}
