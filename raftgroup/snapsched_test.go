package raftgroup

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestSnapshotDueNeedsEntriesAndBytesOrAge(t *testing.T) {
	const young, old = time.Minute, 5 * time.Minute
	for _, c := range []struct {
		entries, logBytes, snapBytes uint64
		age                          time.Duration
		want                         bool
	}{
		{entries: 8191, logBytes: 10 << 30, snapBytes: 0, age: old, want: false},  // too few entries
		{entries: 8192, logBytes: 0, snapBytes: 0, age: young, want: true},        // no snapshot yet
		{entries: 50000, logBytes: 999, snapBytes: 1000, age: young, want: false}, // log smaller than the snapshot
		{entries: 50000, logBytes: 1000, snapBytes: 1000, age: young, want: true}, // as large
		{entries: 8192, logBytes: 2 << 30, snapBytes: 1200 << 20, age: young, want: true},
		{entries: 8192, logBytes: 1 << 20, snapBytes: 1200 << 20, age: old, want: true}, // a shrunk state
	} {
		if got := snapshotDue(c.entries, 8192, c.logBytes, c.snapBytes, c.age, old); got != c.want {
			t.Errorf("snapshotDue(%d entries, %d log bytes, %d snapshot bytes, age %v) = %v, want %v",
				c.entries, c.logBytes, c.snapBytes, c.age, got, c.want)
		}
	}
}

func TestSnapshotSlotWidthCoversTwiceTheLastSnapshot(t *testing.T) {
	for _, c := range []struct {
		n          int
		took, want time.Duration
	}{
		{3, 0, 10 * time.Second},
		{3, 5 * time.Second, 10 * time.Second},
		{3, 5*time.Second + 1, 20 * time.Second},
		{3, 16 * time.Second, 40 * time.Second},
		{1, 0, 30 * time.Second},
		{0, 0, 30 * time.Second},
		{5, 100 * time.Hour, 6144 * time.Second}, // capped: 6 s doubled past an hour
	} {
		if got := snapshotSlotWidth(30*time.Second, c.n, c.took); got != c.want {
			t.Errorf("snapshotSlotWidth(30s, %d voters, took %v) = %v, want %v", c.n, c.took, got, c.want)
		}
	}
}

// For every voter count and snapshot time, at most one voter may start at
// any instant, every voter gets a start window each period, and a snapshot
// started anywhere in a window ends before the next voter's window opens.
func TestSnapshotSlotsTakeTurns(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	const step, inner = 50 * time.Millisecond, 250 * time.Millisecond
	for n := 2; n <= 5; n++ {
		for _, took := range []time.Duration{0, 3 * time.Second, 8 * time.Second, 21 * time.Second} {
			w := snapshotSlotWidth(30*time.Second, n, took)
			period := w * time.Duration(n)
			open := make([]time.Duration, n) // time each voter may start, per period
			for at := time.Duration(0); at < 2*period; at += step {
				now := base.Add(at)
				var starters []int
				for pos := range n {
					if inSnapshotSlot(now, pos, n, w) {
						starters = append(starters, pos)
						open[pos] += step
						// The snapshot it starts ends before any other
						// voter may start.
						for d := inner; d < took+inner; d += inner {
							d := min(d, took)
							for other := range n {
								if other != pos && inSnapshotSlot(now.Add(d), other, n, w) {
									t.Fatalf("n=%d took=%v: voter %d starting at %v would overlap voter %d's start at +%v",
										n, took, pos, at, other, d)
								}
							}
						}
					}
				}
				if len(starters) > 1 {
					t.Fatalf("n=%d took=%v: voters %v may all start at %v", n, took, starters, at)
				}
			}
			for pos, d := range open {
				if d < w { // half a slot per period, two periods
					t.Errorf("n=%d took=%v: voter %d may start for %v in two periods, want %v", n, took, pos, d, w)
				}
			}
		}
	}
	if !inSnapshotSlot(base, -1, 3, time.Second) || !inSnapshotSlot(base, 0, 1, time.Second) {
		t.Error("a replica outside the voter set, or a single voter, must be free to snapshot at any time")
	}
}

func TestVoterPositionSortsVotersByID(t *testing.T) {
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "n3", Suffrage: raft.Voter},
		{ID: "n0", Suffrage: raft.Nonvoter},
		{ID: "n1", Suffrage: raft.Voter},
		{ID: "n2", Suffrage: raft.Voter},
	}}
	for id, want := range map[raft.ServerID]int{"n1": 0, "n2": 1, "n3": 2, "n0": -1, "gone": -1} {
		if pos, n := voterPosition(cfg, id); pos != want || n != 3 {
			t.Errorf("voterPosition(%s) = %d of %d, want %d of 3", id, pos, n, want)
		}
	}
}

type recordingFSM struct {
	applied  int
	restored bool
}

func (f *recordingFSM) Apply(*raft.Log) interface{} { f.applied++; return nil }
func (f *recordingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	f.applied += len(logs)
	return make([]interface{}, len(logs))
}
func (f *recordingFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, nil }
func (f *recordingFSM) Restore(io.ReadCloser) error         { f.restored = true; return nil }

type plainFSM struct{}

func (plainFSM) Apply(*raft.Log) interface{}         { return nil }
func (plainFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, nil }
func (plainFSM) Restore(io.ReadCloser) error         { return nil }

func TestLogBytesCountsAppliedEntries(t *testing.T) {
	inner := &recordingFSM{}
	b := newLogBytes()
	f := countLogBytes(inner, b)
	bf, ok := f.(raft.BatchingFSM)
	if !ok {
		t.Fatal("a batching FSM lost raft.BatchingFSM when wrapped")
	}
	bf.ApplyBatch([]*raft.Log{{Data: make([]byte, 100)}, {Data: make([]byte, 50)}})
	f.Apply(&raft.Log{Data: make([]byte, 7)})
	if got := b.since(); got != 157 || inner.applied != 3 {
		t.Fatalf("after 157 bytes in 3 entries: counted %d bytes, FSM applied %d", got, inner.applied)
	}
	b.at.Store(time.Now().Add(-time.Hour).UnixNano())
	if _, err := f.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if got, age := b.since(), b.age(); got != 0 || age > time.Minute {
		t.Fatalf("after a snapshot: %d bytes, age %v; want 0 and fresh", got, age)
	}
	f.Apply(&raft.Log{Data: make([]byte, 9)})
	b.at.Store(time.Now().Add(-time.Hour).UnixNano())
	if err := f.Restore(io.NopCloser(strings.NewReader(""))); err != nil || !inner.restored {
		t.Fatalf("restore did not reach the FSM: %v", err)
	}
	if got, age := b.since(), b.age(); got != 0 || age > time.Minute {
		t.Fatalf("after a restore: %d bytes, age %v; want 0 and fresh", got, age)
	}
	if _, ok := countLogBytes(plainFSM{}, b).(raft.BatchingFSM); ok {
		t.Fatal("an FSM without batching gained raft.BatchingFSM when wrapped")
	}
}
