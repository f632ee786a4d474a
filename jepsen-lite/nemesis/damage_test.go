package nemesis

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/diskfault"
)

// fakeData lays out a node data dir with a meta and one shard replica,
// each with a log segment of dataLen bytes of data followed by zeros.
func fakeData(t *testing.T, dataLen int) string {
	t.Helper()
	dir := t.TempDir()
	// A replica moved aside by a repair is never damaged again.
	aside := diskfault.ShardDir(dir, 0) + ".damaged-20261125T112517"
	for _, g := range []string{diskfault.MetaDir(dir), diskfault.ShardDir(dir, 0), aside} {
		if err := os.MkdirAll(filepath.Join(g, "wal"), 0o700); err != nil {
			t.Fatal(err)
		}
		b := bytes.Repeat([]byte{0xab}, dataLen)
		b = append(b, make([]byte, 1<<20)...)
		if err := os.WriteFile(filepath.Join(g, "wal", "00000000000000000001-0000000000000000.wal"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDamageFilesModes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))

	dir := fakeData(t, 200<<10)
	mode, what, err := damageFiles(dir, LoseDisk, rng)
	if err != nil || mode != LoseDisk {
		t.Fatalf("lose-disk: %s %v", mode, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("lose-disk left %s (%s)", dir, what)
	}

	dir = fakeData(t, 200<<10)
	mode, what, err = damageFiles(dir, TruncateTail, rng)
	if err != nil || mode != TruncateTail {
		t.Fatalf("truncate-tail: %s %v", mode, err)
	}
	if cut := cutSegments(t, dir); len(cut) != 1 || cut[0] != 200<<10-tailCut {
		t.Fatalf("truncate-tail cut %v (%s), want one segment at %d", cut, what, 200<<10-tailCut)
	}

	dir = fakeData(t, 200<<10)
	mode, what, err = damageFiles(dir, FlipBytes, rng)
	if err != nil || mode != FlipBytes {
		t.Fatalf("flip-bytes: %s %v", mode, err)
	}
	flipped := 0
	for _, seg := range allSegments(t, dir) {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for off, c := range b[:200<<10] {
			if c != 0xab {
				flipped++
				if off < diskfault.SegmentHeader || off >= 200<<10-flipMargin {
					t.Fatalf("flipped byte at %d, outside [%d, %d) (%s)", off, diskfault.SegmentHeader, 200<<10-flipMargin, what)
				}
			}
		}
	}
	if flipped < 1 || flipped > 4 {
		t.Fatalf("%d bytes flipped (%s)", flipped, what)
	}

	// Too little log to flip before the margin: the tail is cut instead.
	dir = fakeData(t, 32<<10)
	mode, _, err = damageFiles(dir, FlipBytes, rng)
	if err != nil || mode != TruncateTail || len(cutSegments(t, dir)) != 1 {
		t.Fatalf("flip-bytes on a short log: %s %v", mode, err)
	}
}

func allSegments(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, g := range []string{diskfault.MetaDir(dir), diskfault.ShardDir(dir, 0), diskfault.ShardDir(dir, 0) + ".damaged-20261125T112517"} {
		s, err := diskfault.Segments(g)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s...)
	}
	return out
}

// cutSegments lists the sizes of segments shorter than fakeData made them.
func cutSegments(t *testing.T, dir string) []int64 {
	t.Helper()
	var out []int64
	for _, s := range allSegments(t, dir) {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 1<<20 {
			out = append(out, fi.Size())
		}
	}
	return out
}

// fakeCluster is node slots whose starts are recorded; Repaired fails
// until repairedAfter calls. Slots marked spare are no members
// (membership_test.go has its membership levers, reshard_test.go its
// shard count).
type fakeCluster struct {
	dirs          []string
	running       []bool
	repair        []bool
	events        []string
	repairedAfter int
	checks        int
	// onEvent, if set, sees every start and stop.
	onEvent func(string)
	fakeMembership
	fakeReshard
}

func (f *fakeCluster) Size() int { return len(f.dirs) }
func (f *fakeCluster) NodeID(i int) string {
	if i < len(f.ids) && f.ids[i] != "" {
		return f.ids[i]
	}
	return "n" + string(rune('1'+i))
}
func (f *fakeCluster) Leaders(context.Context) map[uint32]int { return f.leaders }
func (f *fakeCluster) Running(i int) bool                     { return f.running[i] }
func (f *fakeCluster) Offset(int) time.Duration               { return 0 }
func (f *fakeCluster) Pause(int) error                        { return nil }
func (f *fakeCluster) Resume(int) error                       { return nil }
func (f *fakeCluster) WaitServing(context.Context, int) error { return nil }
func (f *fakeCluster) DataDir(i int) string                   { return f.dirs[i] }
func (f *fakeCluster) Start(i int, _ time.Duration) error     { return f.start(i, "start") }
func (f *fakeCluster) StartRepair(i int) error {
	f.repair[i] = true
	return f.start(i, "start --repair")
}
func (f *fakeCluster) Kill(_ context.Context, i int) error {
	err := f.stop(i, "kill")
	f.sawLive(f.live())
	return err
}
func (f *fakeCluster) Stop(_ context.Context, i int) error { return f.stop(i, "stop") }
func (f *fakeCluster) start(i int, what string) error {
	f.running[i] = true
	f.log(i, what)
	return nil
}
func (f *fakeCluster) stop(i int, what string) error {
	f.running[i] = false
	f.log(i, what)
	return nil
}
func (f *fakeCluster) log(i int, what string) {
	f.events = append(f.events, f.NodeID(i)+" "+what)
	if f.onEvent != nil {
		f.onEvent(f.events[len(f.events)-1])
	}
}
func (f *fakeCluster) Repaired(ctx context.Context, i int) error {
	f.checks++
	if f.checks < f.repairedAfter {
		return errors.New("rejoining")
	}
	return nil
}

// The damage nemesis stops a node, damages its files while it is down,
// starts it with --repair, and its undo waits for the repair; until then a
// second damage goes to the same node.
func TestDamageOneNodeAtATime(t *testing.T) {
	f := &fakeCluster{running: []bool{true, true, true}, repair: make([]bool, 3), repairedAfter: 3}
	for range 3 {
		f.dirs = append(f.dirs, fakeData(t, 200<<10))
	}
	n, err := New(nil, f, nil, []string{"damage"}, time.Second, 7)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	desc, undo, err := n.damage(ctx, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(desc, "damage ") || shape(desc) == "damage" {
		t.Fatalf("description %q (shape %q)", desc, shape(desc))
	}
	first := n.damaged
	if first < 0 || !f.running[first] || !f.repair[first] {
		t.Fatalf("damaged %d, running %v, repair %v", first, f.running, f.repair)
	}
	if len(f.events) != 2 || !strings.HasSuffix(f.events[1], "start --repair") {
		t.Fatalf("events %v: want a stop, then a start with --repair", f.events)
	}
	// Not repaired yet: the next damage picks the same node.
	if _, _, err := n.damage(ctx, func(string) {}); err != nil {
		t.Fatal(err)
	}
	if n.damaged != first || !strings.HasPrefix(f.events[2], f.NodeID(first)) {
		t.Fatalf("second damage went to %d (%v) while %d was unrepaired", n.damaged, f.events, first)
	}
	if err := undo(ctx); err != nil {
		t.Fatalf("undo: %v", err)
	}
	if n.damaged != -1 || f.checks < f.repairedAfter {
		t.Fatalf("undo returned before the repair: damaged %d, %d checks", n.damaged, f.checks)
	}
}

// A replica a repair moved aside (<id>.damaged-<time>) is kept for a
// post-mortem and is never chosen.
func TestDamageSkipsReplicasMovedAside(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dir := fakeData(t, 200<<10)
	aside := filepath.Join(diskfault.ShardDir(dir, 0)+".damaged-20261125T112517", "wal", "00000000000000000001-0000000000000000.wal")
	want, err := os.ReadFile(aside)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		for _, mode := range []string{TruncateTail, FlipBytes} {
			if _, _, err := damageFiles(dir, mode, rng); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, err := os.ReadFile(aside); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the replica moved aside was damaged (%v)", err)
	}
}
