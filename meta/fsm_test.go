package meta

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// applyAt applies cmd as the log at index and returns the FSM's result.
func applyAt(t *testing.T, f *FSM, index uint64, nowMs int64, cmd *metapb.Command) *metapb.Result {
	t.Helper()
	cmd.Version = CommandVersion
	cmd.NowMs = nowMs
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: b}).(*metapb.Result)
	return res
}

func createCmd(name string, p *fsmpb.QueuePolicy) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_CreateQueue{CreateQueue: &metapb.CreateQueue{Name: name, Policy: p}}}
}

func updateCmd(name string, p *fsmpb.QueuePolicy) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_UpdateQueue{UpdateQueue: &metapb.UpdateQueue{Name: name, Policy: p}}}
}

func deleteCmd(name string) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_DeleteQueue{DeleteQueue: &metapb.DeleteQueue{Name: name}}}
}

func placeCmd(count uint32, nodes []string) *metapb.Command {
	addrs := map[string]string{}
	for _, n := range nodes {
		addrs[n] = n + ":7000"
	}
	return &metapb.Command{Cmd: &metapb.Command_PlaceShards{PlaceShards: placeCommand(count, Place(count, 3, nodes), addrs, "test-cluster")}}
}

func policy(vis int64) *fsmpb.QueuePolicy {
	return &fsmpb.QueuePolicy{Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, VisibilityTimeoutMs: vis}
}

func TestFSM_Commands(t *testing.T) {
	f := NewFSM(nil)
	steps := []struct {
		name     string
		cmd      *metapb.Command
		want     metapb.Code
		wantVis  int64 // visibility of "a" afterwards; 0 = absent
		wantCrMs int64
	}{
		{"create", createCmd("a", policy(1000)), metapb.Code_CODE_OK, 1000, 100},
		{"create same policy is idempotent", createCmd("a", policy(1000)), metapb.Code_CODE_OK, 1000, 100},
		{"create different policy", createCmd("a", policy(2000)), metapb.Code_CODE_EXISTS, 1000, 100},
		{"update keeps created time", updateCmd("a", policy(3000)), metapb.Code_CODE_OK, 3000, 100},
		{"update missing", updateCmd("b", policy(1)), metapb.Code_CODE_NOT_FOUND, 3000, 100},
		{"create without policy", createCmd("c", nil), metapb.Code_CODE_INVALID, 3000, 100},
		{"delete missing", deleteCmd("b"), metapb.Code_CODE_NOT_FOUND, 3000, 100},
		{"delete", deleteCmd("a"), metapb.Code_CODE_OK, 0, 0},
		{"create again gets new time", createCmd("a", policy(5)), metapb.Code_CODE_OK, 5, 900},
	}
	for i, st := range steps {
		idx := uint64(i + 1)
		res := applyAt(t, f, idx, int64(idx)*100, st.cmd)
		if res.GetCode() != st.want {
			t.Fatalf("%s: code %v, want %v (%s)", st.name, res.GetCode(), st.want, res.GetMessage())
		}
		q, ok := f.Queue("a")
		if st.wantVis == 0 {
			if ok {
				t.Fatalf("%s: queue a still present", st.name)
			}
			continue
		}
		if !ok || q.GetPolicy().GetVisibilityTimeoutMs() != st.wantVis || q.GetCreatedMs() != st.wantCrMs {
			t.Fatalf("%s: queue a = %v, want visibility %d created %d", st.name, q, st.wantVis, st.wantCrMs)
		}
		if f.AppliedIndex() != idx {
			t.Fatalf("%s: applied %d, want %d", st.name, f.AppliedIndex(), idx)
		}
	}
}

func TestFSM_ApplyOncePerIndex(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 5, 1, createCmd("a", policy(1)))
	applyAt(t, f, 6, 2, deleteCmd("a"))
	// A replay of index 5 (raft re-applies logs after the last snapshot on
	// restart) must not bring the queue back.
	if res := applyAt(t, f, 5, 1, createCmd("a", policy(1))); res != nil {
		t.Fatalf("replayed index returned %v, want nil", res)
	}
	if _, ok := f.Queue("a"); ok {
		t.Fatal("replayed create changed state")
	}
	if got := f.AppliedIndex(); got != 6 {
		t.Fatalf("applied %d, want 6", got)
	}
}

func TestFSM_PlaceShardsOnce(t *testing.T) {
	f := NewFSM(nil)
	if res := applyAt(t, f, 1, 1, placeCmd(8, []string{"n1", "n2", "n3"})); res.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("first place: %v", res)
	}
	first := f.ShardMap()
	if res := applyAt(t, f, 2, 2, placeCmd(4, []string{"n4", "n5", "n6"})); res.GetCode() != metapb.Code_CODE_ALREADY_PLACED {
		t.Fatalf("second place: %v, want ALREADY_PLACED", res)
	}
	if !proto.Equal(first, f.ShardMap()) {
		t.Fatal("second placement changed the map")
	}
	m := shardMapFromProto(first)
	if m.Version != 1 || m.Count != 8 || len(m.Replicas) != 8 || m.RaftAddrs["n2"] != "n2:7000" {
		t.Fatalf("map = %+v", m)
	}
	bad := &metapb.Command{Cmd: &metapb.Command_PlaceShards{PlaceShards: &metapb.PlaceShards{Count: 2, Shards: []*metapb.ShardReplicas{{Shard: 0, Nodes: []string{"x"}}}}}}
	if res := applyAt(t, NewFSM(nil), 1, 1, bad); res.GetCode() != metapb.Code_CODE_INVALID {
		t.Fatalf("incomplete map: %v, want INVALID", res)
	}
}

func TestFSM_SnapshotRestoreRoundTrip(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 1, 10, placeCmd(8, []string{"n1", "n2", "n3"}))
	for i, name := range []string{"zeta", "alpha", "mid"} {
		applyAt(t, f, uint64(i+2), int64(i+20), createCmd(name, policy(int64(i+1)*1000)))
	}
	applyAt(t, f, 5, 30, deleteCmd("mid"))

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	changed := 0
	g := NewFSM(func() { changed++ })
	applyAt(t, g, 1, 1, createCmd("stale", policy(1))) // restore replaces, not merges
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(f.snapshotProto(), g.snapshotProto()) {
		t.Fatalf("restored state differs:\n%v\n%v", f.snapshotProto(), g.snapshotProto())
	}
	if changed != 2 {
		t.Fatalf("onChange ran %d times, want 2 (apply + restore)", changed)
	}
	// The restored applied index keeps the apply-once guard working.
	if res := applyAt(t, g, 5, 30, createCmd("mid", policy(1))); res != nil {
		t.Fatal("restored FSM re-applied an index covered by the snapshot")
	}
	// Snapshot bytes are deterministic: equal state, equal bytes.
	snap2, _ := g.Snapshot()
	sink2 := &memSink{}
	if err := snap2.Persist(sink2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), sink2.Bytes()) {
		t.Fatal("snapshots of equal states differ")
	}
}

func TestFSM_RestoreRejectsForeignData(t *testing.T) {
	good, err := encodeSnapshot(&metapb.Snapshot{Version: SnapshotVersion})
	if err != nil {
		t.Fatal(err)
	}
	badVersion := bytes.Clone(good)
	badVersion[7] = 9
	for name, data := range map[string][]byte{
		"empty":       nil,
		"bad magic":   append([]byte("XXXX"), good[4:]...),
		"bad version": badVersion,
		"truncated":   append(bytes.Clone(good[:11]), 0xff),
	} {
		if err := NewFSM(nil).Restore(io.NopCloser(bytes.NewReader(data))); err == nil {
			t.Errorf("%s: restore accepted it", name)
		}
	}
}

func TestFSM_UnknownVersionPanics(t *testing.T) {
	b, _ := proto.Marshal(&metapb.Command{Version: 99, Cmd: createCmd("a", policy(1)).Cmd})
	defer func() {
		if recover() == nil {
			t.Fatal("unknown command version applied instead of stopping the replica")
		}
	}()
	NewFSM(nil).Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: b})
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

// restoredCopy is a new FSM restored from a snapshot of f.
func restoredCopy(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	return g
}
