package server

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/peer/peerpb"
)

// fill sets every field of m, recursively, to a value that is not zero and
// differs from field to field, so a field the conversion drops or swaps
// shows up as a difference.
func fill(m protoreflect.Message, seed int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		n := seed*100 + int(fd.Number())
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(protoreflect.ValueOfString(fmt.Sprintf("k%d", n)).MapKey(), scalar(fd.MapValue(), n))
		case fd.IsList():
			l := m.Mutable(fd).List()
			for k := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					fill(e.Message(), n+k)
					l.Append(e)
				} else {
					l.Append(scalar(fd, n+k))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(m.Mutable(fd).Message(), n)
		default:
			m.Set(fd, scalar(fd, n))
		}
	}
}

func scalar(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		// The highest value, so every enum field is set to a value
		// that is not the zero one.
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(n))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d", n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("b%d", n)))
	}
	panic(fmt.Sprintf("fill: kind %v of %s", fd.Kind(), fd.FullName()))
}

// logOnly lists the fields of the log's form that the public form lacks by
// design: meta derives them, and no client sets or reads them.
var logOnly = map[protoreflect.FullName]bool{
	"raftq.fsm.v1.QueuePolicy.shard_quota": true,
	// The public form carries the pause beside the policy (QueueInfo.paused).
	"raftq.fsm.v1.QueuePolicy.paused": true,
}

// sameFields reports every way a and b (messages of two packages) differ:
// a field of one that the other lacks by name, or has with another number,
// kind or cardinality, and any value that differs (enums by number).
func sameFields(t *testing.T, path string, a, b protoreflect.Message) {
	t.Helper()
	af, bf := a.Descriptor().Fields(), b.Descriptor().Fields()
	for i := 0; i < bf.Len(); i++ {
		if logOnly[bf.Get(i).FullName()] {
			continue
		}
		if af.ByName(bf.Get(i).Name()) == nil {
			t.Errorf("%s.%s: only in %s", path, bf.Get(i).Name(), b.Descriptor().FullName())
		}
	}
	for i := 0; i < af.Len(); i++ {
		fa := af.Get(i)
		if logOnly[fa.FullName()] {
			continue
		}
		fb := bf.ByName(fa.Name())
		p := path + "." + string(fa.Name())
		switch {
		case fb == nil:
			t.Errorf("%s: only in %s", p, a.Descriptor().FullName())
			continue
		case fa.Number() != fb.Number() || fa.Kind() != fb.Kind() || fa.Cardinality() != fb.Cardinality() || fa.IsMap() != fb.IsMap():
			t.Errorf("%s: declared differently: %v %v #%d vs %v %v #%d", p, fa.Cardinality(), fa.Kind(), fa.Number(), fb.Cardinality(), fb.Kind(), fb.Number())
			continue
		}
		if a.Has(fa) != b.Has(fb) {
			t.Errorf("%s: set on one side only (%v, %v)", p, a.Has(fa), b.Has(fb))
			continue
		}
		va, vb := a.Get(fa), b.Get(fb)
		switch {
		case fa.IsMap():
			if va.Map().Len() != vb.Map().Len() {
				t.Errorf("%s: %d entries vs %d", p, va.Map().Len(), vb.Map().Len())
			}
			va.Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				if w := vb.Map().Get(k); !w.Equal(v) {
					t.Errorf("%s[%v]: %v vs %v", p, k, v, w)
				}
				return true
			})
		case fa.IsList():
			if va.List().Len() != vb.List().Len() {
				t.Errorf("%s: %d items vs %d", p, va.List().Len(), vb.List().Len())
				continue
			}
			for k := 0; k < va.List().Len(); k++ {
				if fa.Kind() == protoreflect.MessageKind {
					sameFields(t, fmt.Sprintf("%s[%d]", p, k), va.List().Get(k).Message(), vb.List().Get(k).Message())
				} else if !va.List().Get(k).Equal(vb.List().Get(k)) {
					t.Errorf("%s[%d]: %v vs %v", p, k, va.List().Get(k), vb.List().Get(k))
				}
			}
		case fa.Kind() == protoreflect.MessageKind:
			sameFields(t, p, va.Message(), vb.Message())
		case !va.Equal(vb):
			t.Errorf("%s: %v vs %v", p, va, vb)
		}
	}
}

// sameEnum checks that two enums have the same values: the conversions
// cast one to the other by number.
func sameEnum(t *testing.T, a, b protoreflect.EnumDescriptor) {
	t.Helper()
	av, bv := a.Values(), b.Values()
	if av.Len() != bv.Len() {
		t.Errorf("%s has %d values, %s %d", a.FullName(), av.Len(), b.FullName(), bv.Len())
	}
	for i := 0; i < av.Len(); i++ {
		v := av.Get(i)
		if w := bv.ByNumber(v.Number()); w == nil || w.Name() != v.Name() {
			t.Errorf("%s = %d: %s has %v", v.Name(), v.Number(), b.FullName(), w)
		}
	}
}

func TestConvertEnumsMatch(t *testing.T) {
	sameEnum(t, raftqv1.QueueMode(0).Descriptor(), fsmpb.QueueMode(0).Descriptor())
	sameEnum(t, fsmpb.QueueMode(0).Descriptor(), raftqv1.QueueMode(0).Descriptor())
	sameEnum(t, raftqv1.State(0).Descriptor(), fsmpb.State(0).Descriptor())
	sameEnum(t, fsmpb.State(0).Descriptor(), raftqv1.State(0).Descriptor())
	sameEnum(t, raftqv1.Reason(0).Descriptor(), fsmpb.Reason(0).Descriptor())
	sameEnum(t, fsmpb.Reason(0).Descriptor(), raftqv1.Reason(0).Descriptor())
}

func TestConvertPolicyRoundTrip(t *testing.T) {
	in := &raftqv1.QueuePolicy{}
	fill(in.ProtoReflect(), 1)
	log := policyToFSM(in)
	sameFields(t, "QueuePolicy", in.ProtoReflect(), log.ProtoReflect())
	back := policyFromFSM(log)
	if !proto.Equal(in, back) {
		t.Errorf("round trip changed the policy:\n in %v\nout %v", in, back)
	}
	if policyToFSM(nil) != nil || policyFromFSM(nil) != nil {
		t.Error("nil policy did not stay nil")
	}
}

// The public record is the log's record field for field, so it is also
// what a client built against the earlier proto (which returned the log's
// type) decodes.
func TestConvertMessage(t *testing.T) {
	in := &fsmpb.Message{}
	fill(in.ProtoReflect(), 2)
	out := messageFromFSM(in)
	sameFields(t, "Message", in.ProtoReflect(), out.ProtoReflect())

	b, err := proto.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	old := &fsmpb.Message{}
	if err := proto.Unmarshal(b, old); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, old) {
		t.Errorf("an old client decodes a different record:\n sent %v\n read %v", in, old)
	}
	if messageFromFSM(nil) != nil {
		t.Error("nil message did not stay nil")
	}
}

func TestConvertQueueInfo(t *testing.T) {
	p := &fsmpb.QueuePolicy{}
	fill(p.ProtoReflect(), 3)
	info := queueInfo(meta.Queue{Name: "jobs", Policy: p, CreatedMs: 1700000000123})
	if info.GetName() != "jobs" || info.GetCreatedMs() != 1700000000123 {
		t.Errorf("queue info %v", info)
	}
	sameFields(t, "QueueInfo.policy", p.ProtoReflect(), info.GetPolicy().ProtoReflect())
	if info.GetPaused() {
		t.Error("a queue not paused shows paused")
	}
	if !queueInfo(meta.Queue{Name: "jobs", Policy: p, Paused: true}).GetPaused() {
		t.Error("a paused queue does not show paused")
	}
}

// Every field of a shard's stats reaches the queue's under the same name:
// counts and moves summed over the shards, the oldest ready age the oldest
// of any.
func TestAddShardStats(t *testing.T) {
	st := &peerpb.QueueStats{}
	fill(st.ProtoReflect(), 1)
	out := &raftqv1.QueueStatsResponse{}
	addShardStats(out, st)
	addShardStats(out, st)
	// A shard with a move the others lack, and one with no stats at all
	// (the queue has no messages there).
	addShardStats(out, &peerpb.QueueStats{Moves: map[string]uint64{"acked": 5}})
	addShardStats(out, nil)

	a, o := st.ProtoReflect(), out.ProtoReflect()
	fields := a.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fa := fields.Get(i)
		if fa.Name() == "name" {
			continue // the server names the queue from the request
		}
		fo := o.Descriptor().Fields().ByName(fa.Name())
		if fo == nil || fo.Kind() != fa.Kind() || fo.IsMap() != fa.IsMap() {
			t.Errorf("shard stats field %s: missing from QueueStatsResponse or declared differently", fa.Name())
			continue
		}
		switch {
		case fa.IsMap():
			va, vo := a.Get(fa).Map(), o.Get(fo).Map()
			va.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				if w := vo.Get(k); !w.IsValid() || w.Uint() != 2*v.Uint() {
					t.Errorf("%s[%v] = %v, want the sum of two shards' %v", fa.Name(), k, w, v)
				}
				return true
			})
		case fa.Name() == "oldest_ready_age_ms":
			if got, want := o.Get(fo).Int(), a.Get(fa).Int(); got != want {
				t.Errorf("%s = %d, want the oldest shard's %d", fa.Name(), got, want)
			}
		case fa.Kind() == protoreflect.Uint64Kind:
			if got, want := o.Get(fo).Uint(), 2*a.Get(fa).Uint(); got != want {
				t.Errorf("%s = %d, want the sum of two shards' %d", fa.Name(), got, want)
			}
		default:
			t.Errorf("shard stats field %s of kind %v: say in addShardStats and here how it adds up", fa.Name(), fa.Kind())
		}
	}
	if out.Moves["acked"] != 5 {
		t.Errorf("moves[acked] = %d, want the one shard's 5", out.Moves["acked"])
	}
}
