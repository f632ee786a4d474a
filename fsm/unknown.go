package fsm

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// IgnorableKindMin is the first field number reserved for ignorable command
// kinds, in fsmpb.Command and in the meta group's metapb.Command alike. A
// kind numbered below it that this binary does not know stops the replica:
// applying the entry without it would leave this replica's state different
// from the leader's. A kind numbered at or above it is an optional command
// (a hint, a statistic) that a newer binary may propose knowing that older
// replicas skip it; no replicated state may depend on it. The rule covers
// every field of the Command message, not only oneof arms: proto3 keeps the
// fields it does not know as unknown bytes on the message that holds them.
const IgnorableKindMin = 1000

// UnknownKinds returns the field numbers of m's own unknown fields in wire
// order, without repeats, and whether every one is ignorable
// (>= IgnorableKindMin). A oneof arm this binary lacks decodes to no arm at
// all plus unknown bytes, so these bytes are the only trace of the command.
// Fields nested inside known fields are not m's and are not looked at: an
// older reader ignores them by design (see fsm.proto).
func UnknownKinds(m protoreflect.ProtoMessage) (nums []int32, ignorable bool) {
	b := m.ProtoReflect().GetUnknown()
	ignorable = true
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			// proto.Unmarshal accepted these bytes, so this cannot happen;
			// if it does, nothing about the command is known.
			return append(nums, 0), false
		}
		v := protowire.ConsumeFieldValue(num, typ, b[n:])
		if v < 0 {
			return append(nums, int32(num)), false
		}
		b = b[n+v:]
		if !slices.Contains(nums, int32(num)) {
			nums = append(nums, int32(num))
		}
		if num < IgnorableKindMin {
			ignorable = false
		}
	}
	return nums, ignorable
}

// UnknownKindMessage is the panic message of a replica that meets a
// command it cannot apply: which log entry, which kind, and which binary.
func UnknownKindMessage(group string, index, term uint64, msg protoreflect.FullName, nums []int32) string {
	return fmt.Sprintf("%s: log index %d term %d: unknown command kind %s (field of %s); "+
		"this binary (%s, log format %d) cannot apply it and stops rather than diverge: "+
		"upgrade this node to the version the leader runs",
		group, index, term, kindList(nums), msg, BinaryVersion(), LogFormat)
}

// checkKinds panics if e holds a command this binary cannot apply. It runs
// before any command of the batch changes state, so an older follower
// stops at the first entry a newer leader wrote for it instead of applying
// the rest of the log without it. The process stops; once restarted with a
// binary that knows the kind, raft replays the log from the last snapshot,
// which predates the entry.
func checkKinds(e *fsmpb.Entry, index, term uint64) {
	for _, c := range e.GetCommands() {
		nums, ignorable := UnknownKinds(c)
		if len(nums) == 0 || ignorable {
			continue
		}
		panic(UnknownKindMessage("fsm", index, term, c.ProtoReflect().Descriptor().FullName(), nums))
	}
}

func kindList(nums []int32) string {
	s := make([]string, len(nums))
	for i, n := range nums {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// KindName names a command's kind by its oneof field ("enqueue"), or
// "kind N" for one this binary does not know, or "empty".
func KindName(c *fsmpb.Command) string {
	if f := kindField(c); f != nil {
		return string(f.Name())
	}
	if nums, _ := UnknownKinds(c); len(nums) > 0 {
		return "kind " + kindList(nums)
	}
	return "empty"
}

// kindField is the set oneof arm of c, nil if none.
func kindField(c *fsmpb.Command) protoreflect.FieldDescriptor {
	m := c.ProtoReflect()
	return m.WhichOneof(m.Descriptor().Oneofs().ByName("cmd"))
}
