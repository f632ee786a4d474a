package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
)

// rawCommand is a meta command as a newer binary would write one: a
// version-1 command whose kind is field num, unknown to this binary.
func rawCommand(num protowire.Number) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, CommandVersion)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, []byte{0x0a, 0x01, 'x'})
}

func TestFSM_UnknownCommandStopsReplica(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 1, 5, createCmd("a", policy(1)))
	var p any
	func() {
		defer func() { p = recover() }()
		f.Apply(&raft.Log{Index: 2, Term: 4, Type: raft.LogCommand, Data: rawCommand(99)})
	}()
	if p == nil {
		t.Fatal("a meta command of unknown kind applied instead of stopping the replica")
	}
	msg := fmt.Sprint(p)
	for _, want := range []string{"meta: log index 2 term 4", "unknown command kind 99", "raftq.meta.v1.Command", fsm.BinaryVersion(), fmt.Sprintf("log format %d", fsm.LogFormat)} {
		if !strings.Contains(msg, want) {
			t.Errorf("panic message %q lacks %q", msg, want)
		}
	}
	if f.AppliedIndex() != 1 {
		t.Errorf("applied index %d moved past the entry that stopped the replica", f.AppliedIndex())
	}
}

func TestFSM_IgnorableUnknownCommandIsSkipped(t *testing.T) {
	f := NewFSM(nil)
	res, _ := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: rawCommand(fsm.IgnorableKindMin + 3)}).(*metapb.Result)
	if res == nil || res.GetCode() != metapb.Code_CODE_OK {
		t.Fatalf("ignorable kind: %v, want OK (skipped)", res)
	}
	if f.AppliedIndex() != 1 {
		t.Fatalf("applied index %d, want 1", f.AppliedIndex())
	}
	if res := applyAt(t, f, 2, 5, &metapb.Command{}); res.GetCode() != metapb.Code_CODE_INVALID {
		t.Fatalf("empty command: %v, want CODE_INVALID", res)
	}
}

func TestFSM_NodeFormatsRecordedAndSnapshotted(t *testing.T) {
	f := NewFSM(nil)
	rec := func(i uint64, id string, n uint32) *metapb.Result {
		return applyAt(t, f, i, 5, &metapb.Command{Cmd: &metapb.Command_NodeFormat{NodeFormat: &metapb.NodeFormat{NodeId: id, Format: n}}})
	}
	rec(1, "n2", 3)
	rec(2, "n1", 2)
	rec(3, "n2", 1) // a rolled-back binary lowers its record
	if res := rec(4, "n3", 0); res.GetCode() != metapb.Code_CODE_INVALID {
		t.Errorf("format 0 recorded: %v", res)
	}
	want := []fsm.NodeFormat{{NodeID: "n1", Format: 2}, {NodeID: "n2", Format: 1}}
	if got := f.NodeFormats(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("formats %v, want %v", got, want)
	}
	if f.NodeFormat("n3") != 0 {
		t.Errorf("n3 has a format though none was recorded")
	}
	var sink memSink
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(nil)
	if err := g.Restore(&sink); err != nil {
		t.Fatal(err)
	}
	if got := g.NodeFormats(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("formats after restore %v, want %v", got, want)
	}
}

func TestCommandFormatsCoverEveryKind(t *testing.T) {
	arms := (&metapb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	for i := 0; i < arms.Len(); i++ {
		f := arms.Get(i)
		n, ok := commandFormats[f.Name()]
		if !ok {
			t.Errorf("meta command kind %s has no entry in commandFormats", f.Name())
		}
		if n > fsm.LogFormat {
			t.Errorf("meta command kind %s needs format %d, above this binary's %d", f.Name(), n, fsm.LogFormat)
		}
		if f.Number() >= fsm.IgnorableKindMin {
			t.Errorf("meta command kind %s is numbered in the ignorable range", f.Name())
		}
	}
	if len(commandFormats) != arms.Len() {
		t.Errorf("commandFormats has %d entries for %d kinds", len(commandFormats), arms.Len())
	}
}

// A leader of a real three-voter meta group proposes a kind that needs
// format 2 only once every replica has recorded format 2: refused with a
// FormatLagError naming the lagging replica while m3 is at format 1, and
// accepted (and applied on every replica) once m3 records format 2.
func TestStore_NewKindWaitsForEveryReplica(t *testing.T) {
	stores := openGatedGroup(t, 3)
	leader := leaderOf(t, stores, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Only create_queue needs the newer format here; the format records
	// themselves stay format 1.
	leader.kindFormat = func(c *metapb.Command) uint32 {
		if _, ok := c.GetCmd().(*metapb.Command_CreateQueue); ok {
			return 2
		}
		return CommandFormat(c)
	}
	for id, n := range map[string]uint32{"m1": 2, "m2": 2, "m3": 1} {
		if err := leader.RecordNodeFormat(ctx, id, n); err != nil {
			t.Fatal(err)
		}
	}
	_, err := leader.CreateQueue(ctx, "new-kind", policy(1))
	var lag *fsm.FormatLagError
	if !errors.As(err, &lag) || !errors.Is(err, fsm.ErrFormatLag) {
		t.Fatalf("proposal with m3 at format 1: %v, want a FormatLagError", err)
	}
	if len(lag.Lagging) != 1 || lag.Lagging[0] != (fsm.NodeFormat{NodeID: "m3", Format: 1}) || lag.Need != 2 || lag.Group != "meta" {
		t.Fatalf("lag %+v, want m3 at format 1 in meta, need 2", lag)
	}
	if !strings.Contains(err.Error(), "m3 (format 1)") || !strings.Contains(err.Error(), "create_queue") {
		t.Errorf("error %q does not name the lagging replica and the kind", err)
	}
	if _, ok := leader.Queue("new-kind"); ok {
		t.Fatal("the refused command was applied")
	}

	if err := leader.RecordNodeFormat(ctx, "m3", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.CreateQueue(ctx, "new-kind", policy(1)); err != nil {
		t.Fatalf("proposal once every replica records format 2: %v", err)
	}
	for _, s := range stores {
		waitFor(t, func() bool { _, ok := s.Queue("new-kind"); return ok && s.NodeFormat("m3") == 2 })
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
