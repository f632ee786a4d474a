package shard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

// A backup piece taken on a shard leader seeds a new group: every replica
// starts from it, the state is the piece's (messages, leases, dedup keys),
// the group's terms go on above the piece's, and writes work at once.
func TestBackupPiece_SeedsANewGroup(t *testing.T) {
	old := newCluster(t, 3, true, fastTuning())
	l := old.leaderWithin(10 * time.Second)
	mustQueue(t, l.sh, "q", &fsmpb.QueuePolicy{VisibilityTimeoutMs: 60_000, DedupWindowMs: 600_000})
	var ids []uint64
	for i := range 20 {
		ids = append(ids, mustEnqueue(t, l.sh, "q", &fsmpb.NewMessage{Body: []byte{byte(i)}, DedupKey: string(rune('a' + i))}))
	}
	leased := mustReceive(t, l.sh, "q", 3, time.Minute)
	mustPropose(t, l.sh, ackCmd(receiptOf(leased[0])))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, f := range old.followers(l) {
		var nl *raftgroup.NotLeaderError
		if _, _, err := f.sh.BackupPiece(ctx, io.Discard); !errors.As(err, &nl) {
			t.Errorf("BackupPiece on follower %s: %v, want a NotLeaderError", f.id, err)
		}
	}
	var piece bytes.Buffer
	index, term, err := l.sh.BackupPiece(ctx, &piece)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := fsm.CheckSnapshot(bytes.NewReader(piece.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if sum.AppliedIndex != index || sum.Messages != 20 || sum.Dedup != 20 {
		t.Fatalf("piece: %+v at index %d; want 20 messages and 20 dedup keys at the index", sum, index)
	}
	want, _ := l.sh.FSM().Stats("q")

	seed := &raftgroup.Seed{Index: index, Term: term, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(piece.Bytes())), nil
	}}
	fresh := newCluster(t, 3, true, fastTuning(), func(c *cluster) { c.seed = seed })
	nl := fresh.leaderWithin(10 * time.Second)
	if got := nl.sh.Info().Term; got <= term {
		t.Errorf("new group's term %d, want above the piece's %d", got, term)
	}
	got, _ := nl.sh.FSM().Stats("q")
	if got.Ready != want.Ready || got.InFlight != want.InFlight || got.Acked != want.Acked {
		t.Errorf("seeded stats %+v, want %+v", got, want)
	}
	// A dedup key of the piece still deduplicates, and new ids continue
	// above the piece's.
	res := mustPropose(t, nl.sh, enqueueCmd("q", &fsmpb.NewMessage{Body: []byte("again"), DedupKey: "b"}))
	if it := res.GetEnqueue().GetItems()[0]; it.GetMessageId() != ids[1] || !it.GetDeduplicated() {
		t.Errorf("enqueue with a used dedup key: %v, want message %d as a duplicate", it, ids[1])
	}
	if id := mustEnqueue(t, nl.sh, "q", &fsmpb.NewMessage{Body: []byte("new")}); id <= ids[len(ids)-1] {
		t.Errorf("new message id %d, not above the piece's %d", id, ids[len(ids)-1])
	}
	fresh.converge()
	// A seeded replica restarts from its own disk, not from the seed.
	f := fresh.followers(nl)[0]
	fresh.kill(f)
	fresh.restart(f)
	fresh.converge()
}
