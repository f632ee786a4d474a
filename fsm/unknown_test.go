package fsm

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// unknownCmd is a command as a newer binary would write one: a oneof arm
// (field num) this binary's fsmpb.Command does not have.
func unknownCmd(num protowire.Number) *fsmpb.Command {
	inner := protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, "q")
	raw := protowire.AppendTag(nil, num, protowire.BytesType)
	raw = protowire.AppendBytes(raw, inner)
	c := &fsmpb.Command{}
	c.ProtoReflect().SetUnknown(raw)
	return c
}

// applyRecover applies one entry and returns the panic value, nil if none.
func applyRecover(f *FSM, index uint64, cmds ...*fsmpb.Command) (out any, panicked any) {
	e := &fsmpb.Entry{Version: EntryVersion, NowMs: t0, Commands: cmds}
	data, err := EncodeEntry(e)
	if err != nil {
		return nil, err
	}
	defer func() { panicked = recover() }()
	return f.Apply(makeLog(index, 3, data)), nil
}

func TestUnknownCommandStopsReplica(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	before := stateDigest(t, h.f)
	applied := h.f.AppliedIndex()

	// A known command ahead of the unknown one in the same entry: nothing
	// of the entry may apply, or the replica would hold half of it.
	_, p := applyRecover(h.f, applied+1, upsertCmd("other", nil), unknownCmd(999))
	if p == nil {
		t.Fatal("an entry with an unknown command kind applied instead of stopping the replica")
	}
	msg := fmt.Sprint(p)
	for _, want := range []string{
		"log index 2 term 3",
		"unknown command kind 999",
		"raftq.fsm.v1.Command",
		fmt.Sprintf("log format %d", LogFormat),
		BinaryVersion(),
		"stops rather than diverge",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("panic message %q lacks %q", msg, want)
		}
	}
	if got := stateDigest(t, h.f); got != before {
		t.Error("the entry that stopped the replica changed its state")
	}
	if got := h.f.AppliedIndex(); got != applied {
		t.Errorf("applied index moved to %d past the entry that stopped the replica (was %d)", got, applied)
	}
	if _, ok := h.f.Queues()["other"]; ok {
		t.Error("the known command beside the unknown one was applied")
	}
}

func TestUnknownNonOneofFieldStopsReplica(t *testing.T) {
	// A new field on Command outside the oneof (a modifier an older
	// replica would ignore) is just as unsafe below IgnorableKindMin.
	c := upsertCmd("q", nil)
	c.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 40, protowire.VarintType), 1))
	if _, p := applyRecover(New(Options{}), 1, c); p == nil || !strings.Contains(fmt.Sprint(p), "unknown command kind 40") {
		t.Fatalf("unknown field 40 on a known command: panic %v, want a stop naming kind 40", p)
	}
}

func TestIgnorableUnknownCommandIsSkipped(t *testing.T) {
	for _, num := range []protowire.Number{IgnorableKindMin, IgnorableKindMin + 7, 5000} {
		t.Run(fmt.Sprint(num), func(t *testing.T) {
			h := newHarness(t)
			h.mustQueue("q", nil)
			res := h.apply(unknownCmd(num), upsertCmd("other", nil))
			if c := res[0].GetStatus().GetCode(); c != fsmpb.Code_CODE_OK {
				t.Errorf("ignorable kind %d: status %v, want OK (skipped)", num, c)
			}
			if c := res[1].GetStatus().GetCode(); c != fsmpb.Code_CODE_OK {
				t.Errorf("command after the ignorable one: %v", res[1].GetStatus())
			}
			if _, ok := h.f.Queues()["other"]; !ok {
				t.Error("the command after an ignorable unknown one did not apply")
			}
		})
	}
	// Ignorable only if every unknown field is: one must-understand field
	// beside an ignorable one still stops the replica.
	c := unknownCmd(IgnorableKindMin)
	c.ProtoReflect().SetUnknown(append(c.ProtoReflect().GetUnknown(), unknownCmd(998).ProtoReflect().GetUnknown()...))
	if _, p := applyRecover(New(Options{}), 1, c); p == nil {
		t.Error("a command with kinds 1000 and 20 was skipped")
	}
}

func TestEmptyCommandIsRefusedNotFatal(t *testing.T) {
	h := newHarness(t)
	if c := h.one(&fsmpb.Command{}).GetStatus().GetCode(); c != fsmpb.Code_CODE_INVALID_ARGUMENT {
		t.Fatalf("empty command: %v, want INVALID_ARGUMENT", c)
	}
}

func TestKindName(t *testing.T) {
	for _, tc := range []struct {
		c    *fsmpb.Command
		want string
	}{
		{enqueueCmd("q", body("x")), "enqueue"},
		{tickCmd(), "tick"},
		{unknownCmd(999), "kind 999"},
		{&fsmpb.Command{}, "empty"},
	} {
		if got := KindName(tc.c); got != tc.want {
			t.Errorf("KindName = %q, want %q", got, tc.want)
		}
	}
}
