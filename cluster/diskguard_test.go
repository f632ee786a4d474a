package cluster

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/raftq/raftq/shard"
)

// The guard refuses sends below the reserve and accepts them again only a
// margin above it, logs each change once, warns at twice the reserve, and
// refuses nothing when it cannot look or has no reserve.
func TestDiskGuardRefusesBelowReserve(t *testing.T) {
	var logs bytes.Buffer
	g := newDiskGuard("n1", "/data", DiskReserve{Bytes: 100 << 20, Percent: 5}, slog.New(slog.NewTextHandler(&logs, nil)))
	const total = 1 << 30 // 5 % is 51 MiB: the 100 MiB floor wins
	free := uint64(500 << 20)
	var statErr error
	g.space = func(string) (uint64, uint64, error) { return free, total, statErr }
	step := func(f uint64) error {
		free = f
		g.check()
		return g.admitSend()
	}
	count := func(s string) int { return strings.Count(logs.String(), s) }

	if err := step(500 << 20); err != nil {
		t.Fatalf("500 MiB free: %v", err)
	}
	if err := step(150 << 20); err != nil || count("disk space low") != 1 {
		t.Fatalf("150 MiB free (below twice the reserve): %v, %d low-space warnings", err, count("disk space low"))
	}
	err := step(99 << 20)
	var full *shard.DiskFullError
	if !errors.As(err, &full) || !errors.Is(err, shard.ErrDiskFull) || full.Free != 99<<20 || full.Reserve != 100<<20 {
		t.Fatalf("99 MiB free: %v, want a DiskFullError with 99 MiB free of a 100 MiB reserve", err)
	}
	if want := "node n1: disk almost full (99 MiB free, reserve 100 MiB)"; err.Error() != want {
		t.Fatalf("refusal reads %q, want %q", err, want)
	}
	if err := step(101 << 20); err == nil {
		t.Fatal("101 MiB free: accepted sends again within the margin above the reserve")
	}
	if err := step(110 << 20); err != nil {
		t.Fatalf("110 MiB free: %v", err)
	}
	if count("refusing new sends") != 1 || count("accepting sends again") != 1 || count("disk space low") != 1 {
		t.Fatalf("want one refusal, one recovery and one low-space line:\n%s", logs.String())
	}
	if sp := g.state.Load(); !sp.Known || sp.Free != 110<<20 || sp.Reserve != 100<<20 || sp.Refusing {
		t.Fatalf("state %+v", sp)
	}

	if err := step(10 << 20); err == nil {
		t.Fatal("10 MiB free: accepted")
	}
	statErr = errors.New("statfs: no such file")
	if err := step(10 << 20); err != nil {
		t.Fatalf("when it cannot look the guard must refuse nothing: %v", err)
	}

	none := newDiskGuard("n1", "/data", DiskReserve{}, slog.New(slog.DiscardHandler))
	none.space = func(string) (uint64, uint64, error) { return 0, total, nil }
	none.check()
	if err := none.admitSend(); err != nil {
		t.Fatalf("no reserve: %v", err)
	}
}

func TestDiskReserveOf(t *testing.T) {
	r := DiskReserve{Bytes: 512 << 20, Percent: 5}
	if got := r.of(1 << 30); got != 512<<20 {
		t.Errorf("1 GiB disk: %d", got)
	}
	if got := r.of(100 << 30); got != 5<<30 {
		t.Errorf("100 GiB disk: %d, want 5 GiB", got)
	}
}
