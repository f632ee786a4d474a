package systest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/diskfault"
	"github.com/raftq/raftq/raftstore"
)

// damageRow is one way a stopped follower's files get damaged (issue #26's
// table): the node must find it on restart, leave the replica out (no
// vote, no service) with a message that says why and what to do, keep
// serving through the other two, and `raftq cluster repair` must bring it
// back with every acknowledged message.
type damageRow struct {
	name   string
	hard   bool     // stop with kill -9 instead of SIGTERM
	args   []string // extra node flags
	reason string   // the raftstore.DamageError reason the node must report
	// damage changes the stopped victim's files; early is a message body
	// acknowledged well before the stop (not in the log's last batch).
	damage func(t *testing.T, r *rig, victim int, early string)
}

func damageRows() []damageRow {
	shardDir := func(r *rig, i int) string { return diskfault.ShardDir(r.c.Nodes[i].Dir, 0) }
	return []damageRow{
		{name: "stable-store-deleted", reason: raftstore.ReasonStoreMissing,
			damage: func(t *testing.T, r *rig, v int, _ string) {
				mustRemove(t, filepath.Join(shardDir(r, v), "raft.db"))
			}},
		{name: "wal-deleted", hard: true, reason: raftstore.ReasonStoreMissing,
			damage: func(t *testing.T, r *rig, v int, _ string) {
				mustRemove(t, filepath.Join(shardDir(r, v), "wal"))
			}},
		{name: "log-tail-cut-8KiB", hard: true, reason: raftstore.ReasonSegment,
			damage: func(t *testing.T, r *rig, v int, _ string) {
				seg := newestSegment(t, r, v)
				size, err := diskfault.CutTail(seg, 8<<10)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("cut %s to %d bytes (8 KiB before the end of its data)", seg, size)
			}},
		// The file keeps its length: only the facts (the index the replica
		// had made durable) show that entries are gone. SIGTERM, so the
		// facts are exact (a kill -9 may leave them up to 200 ms behind).
		{name: "log-tail-zeroed-8KiB", reason: raftstore.ReasonLogShort,
			damage: func(t *testing.T, r *rig, v int, _ string) {
				seg := newestSegment(t, r, v)
				end, err := diskfault.DataEnd(seg)
				if err != nil {
					t.Fatal(err)
				}
				if err := diskfault.Zero(seg, end-8<<10); err != nil {
					t.Fatal(err)
				}
				t.Logf("zeroed %s from %d to %d, size unchanged", seg, end-8<<10, end)
			}},
		{name: "message-body-byte-changed", reason: raftstore.ReasonChecksum,
			damage: func(t *testing.T, r *rig, v int, early string) {
				seg, off := r.findBody(v, early)
				mustFlip(t, seg, off+int64(len(early))/2, 1)
				t.Logf("flipped one byte of body %q at %s:%d", early, seg, off+int64(len(early))/2)
			}},
		// The two bytes before a body are its protobuf tag and length: the
		// command no longer decodes (before checksums, the FSM panicked).
		{name: "entry-encoding-broken", hard: true, reason: raftstore.ReasonChecksum,
			damage: func(t *testing.T, r *rig, v int, early string) {
				seg, off := r.findBody(v, early)
				mustFlip(t, seg, off-2, 2)
				t.Logf("flipped the field tag and length of body %q at %s:%d", early, seg, off-2)
			}},
		// Snapshots every 64 entries, so the follower has some within
		// seconds; the node has no other way to take one (docs/shard.md).
		{name: "snapshot-bytes-flipped", reason: raftstore.ReasonSnapshot,
			args: []string{"--snapshot-threshold", "64", "--snapshot-interval", "1s"},
			damage: func(t *testing.T, r *rig, v int, _ string) {
				snap, err := diskfault.NewestSnapshot(shardDir(r, v))
				if err != nil {
					t.Fatal(err)
				}
				fi, err := os.Stat(snap)
				if err != nil {
					t.Fatal(err)
				}
				mustFlip(t, snap, fi.Size()/2, 16)
				t.Logf("flipped 16 bytes in the middle of %s (%d bytes)", snap, fi.Size())
			}},
	}
}

// TestDamagedReplicaIsRefusedAndRepaired runs each row of issue #26's
// table against real processes: 3 nodes, 1 shard, a follower stopped,
// damaged and restarted.
func TestDamagedReplicaIsRefusedAndRepaired(t *testing.T) {
	for _, row := range damageRows() {
		t.Run(row.name, func(t *testing.T) { runDamageRow(t, row) })
	}
}

func runDamageRow(t *testing.T, row damageRow) {
	r := newRig(t, row.args...)
	early := r.send("early", 20)
	r.send("before", 200)
	_, victim, _ := r.roles()
	if row.reason == raftstore.ReasonSnapshot {
		waitSnapshots(t, r, victim)
	}
	r.stop(victim, row.hard)
	row.damage(t, r, victim, early[5])
	from := r.logSize(victim)
	r.c.Restart(victim)
	r.waitServing(victim)
	r.expectDamaged(victim, from, row.reason)

	// The other two serve; with one of them frozen, the damaged replica
	// does not help elect anyone.
	r.send("during", 50)
	r.pauseShowsNoElection(victim)
	r.send("after", 50)

	r.repair(victim, (victim+1)%len(r.c.Nodes))
	r.send("repaired", 20)
	r.verifyAll()
}

func newestSegment(t *testing.T, r *rig, i int) string {
	t.Helper()
	seg, err := diskfault.NewestSegment(diskfault.ShardDir(r.c.Nodes[i].Dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	return seg
}

// waitSnapshots waits until node i has two snapshots of shard 0 (raft
// keeps two: with the newest damaged it used to fall back to the older
// one without a word), sending to make the log grow.
func waitSnapshots(t *testing.T, r *rig, i int) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for k := 0; ; k++ {
		snaps, err := diskfault.Snapshots(diskfault.ShardDir(r.c.Nodes[i].Dir, 0))
		if err == nil && len(snaps) >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s took %d snapshots: %v", r.c.Nodes[i].ID, len(snaps), err)
		}
		r.send(fmt.Sprintf("snap%d", k), 20)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func mustFlip(t *testing.T, path string, off int64, n int) {
	t.Helper()
	if err := diskfault.Flip(path, off, n); err != nil {
		t.Fatal(err)
	}
}
