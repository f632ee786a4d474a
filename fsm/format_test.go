package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func TestCommandFormatsCoverEveryKind(t *testing.T) {
	arms := (&fsmpb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd").Fields()
	for i := 0; i < arms.Len(); i++ {
		f := arms.Get(i)
		m := (&fsmpb.Command{}).ProtoReflect()
		m.Set(f, m.NewField(f))
		c := m.Interface().(*fsmpb.Command)
		n, ok := commandFormat(c)
		switch {
		case !ok:
			t.Errorf("command kind %s (field %d) is not in the commandFormat table", f.Name(), f.Number())
		case n < BaseFormat || n > LogFormat:
			t.Errorf("command kind %s needs format %d, outside [%d, %d]", f.Name(), n, BaseFormat, LogFormat)
		case CommandFormat(c) != n:
			t.Errorf("CommandFormat(%s) = %d, the table says %d", f.Name(), CommandFormat(c), n)
		}
		if f.Number() >= IgnorableKindMin {
			t.Errorf("command kind %s is numbered %d, in the ignorable range: replicas that lack it skip it", f.Name(), f.Number())
		}
	}
	if got := CommandFormat(&fsmpb.Command{}); got != BaseFormat {
		t.Errorf("CommandFormat(empty) = %d, want %d", got, BaseFormat)
	}
}

func TestCheckFormat(t *testing.T) {
	recorded := map[string]uint32{"n1": 2, "n2": 3, "n4": 1}
	formatOf := func(id string) uint32 { return recorded[id] }
	replicas := []string{"n4", "n1", "n2", "n3"} // n3 has recorded nothing

	if err := CheckFormat("shard-0", "enqueue", BaseFormat, replicas, formatOf); err != nil {
		t.Fatalf("base format refused: %v", err)
	}
	if err := CheckFormat("shard-0", "x", 2, []string{"n1", "n2"}, formatOf); err != nil {
		t.Fatalf("format 2 refused though every replica has it: %v", err)
	}
	err := CheckFormat("shard-0", "x", 2, replicas, formatOf)
	var lag *FormatLagError
	if !errors.As(err, &lag) || !errors.Is(err, ErrFormatLag) {
		t.Fatalf("CheckFormat = %v, want a FormatLagError", err)
	}
	want := []NodeFormat{{"n3", 1}, {"n4", 1}}
	if len(lag.Lagging) != len(want) || lag.Lagging[0] != want[0] || lag.Lagging[1] != want[1] {
		t.Errorf("lagging = %v, want %v", lag.Lagging, want)
	}
	for _, s := range []string{"shard-0", "command x", "log format 2", "n3 (format 1)", "n4 (format 1)"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "n1") || strings.Contains(err.Error(), "n2 ") {
		t.Errorf("error %q names replicas that support the format", err)
	}
}
