package fsm

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// randomMsg fills every field a snapshot writes, each zero about a third
// of the time, with extremes for the integers.
func randomMsg(rng *rand.Rand, q *queue) *msg {
	num := func() uint64 {
		switch rng.IntN(6) {
		case 0, 1:
			return 0
		case 2:
			return math.MaxUint64 // a negative int64: ten bytes
		case 3:
			return uint64(math.MaxInt64)
		default:
			return rng.Uint64() >> rng.IntN(64)
		}
	}
	str := func() string {
		switch rng.IntN(4) {
		case 0:
			return ""
		case 1:
			return "héllo, 世界"
		case 2:
			return strings.Repeat("x", rng.IntN(300)) // a two-byte length
		default:
			return string(rune('a' + rng.IntN(26)))
		}
	}
	m := &msg{
		id: num(), seq: num(), q: q,
		typ: str(), group: str(), dedupKey: str(), lastError: str(),
		enqueuedMs: int64(num()), availableMs: int64(num()), firstReceivedMs: int64(num()),
		lastReceivedMs: int64(num()), stateChangedMs: int64(num()), expireMs: int64(num()),
		leaseEpoch: num(), leaseDeadline: int64(num()), leaseTerm: num(),
		receiveCount: uint32(num()), priority: uint8(num()),
		state: fsmpb.State(rng.IntN(6)), deadReason: fsmpb.Reason(rng.IntN(8)), uniqueUntilDone: rng.IntN(2) == 0,
	}
	if rng.IntN(3) > 0 {
		m.body = make([]byte, rng.IntN(2000))
		for i := range m.body {
			m.body[i] = byte(rng.Uint32())
		}
	}
	if rng.IntN(3) == 0 {
		// Zero fields too: proto leaves them out, as the encoder must.
		m.retry = &retryPolicy{maxReceives: uint32(num()), backoffBaseMs: int64(num()), backoffMaxMs: int64(num())}
	}
	if rng.IntN(3) == 0 {
		m.result = make([]byte, 1+rng.IntN(300))
		for i := range m.result {
			m.result[i] = byte(rng.Uint32())
		}
	}
	for i := range rng.IntN(4) {
		// Empty keys and values are legal; proto writes them inside the
		// map entry.
		m.attrs = append(m.attrs, kv{k: strings.Repeat("k", i) + str(), v: str()})
	}
	// Sorted and unique by key, as the FSM keeps them.
	slices.SortFunc(m.attrs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	m.attrs = slices.CompactFunc(m.attrs, func(a, b kv) bool { return a.k == b.k })
	for range rng.IntN(4) {
		m.history = append(m.history, attempt{
			epoch: num(), receivedMs: int64(num()), endedMs: int64(num()),
			outcome: fsmpb.Reason(rng.IntN(8)), err: str(), consumer: str(),
		})
	}
	return m
}

func TestMessageRecordEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	mo := proto.MarshalOptions{Deterministic: true}
	queues := []*queue{{name: "q"}, {name: "orders-éu"}}
	var buf []byte
	cases := []*msg{{q: queues[0]}} // every field zero: an empty record
	for range 5000 {
		cases = append(cases, randomMsg(rng, queues[rng.IntN(len(queues))]))
	}
	for i, m := range cases {
		want, err := mo.Marshal(m.toProto(true))
		if err != nil {
			t.Fatal(err)
		}
		buf, err = appendMessageRecord(buf[:0], m, false)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("case %d: hand encoding differs from proto.Marshal\n got %x\nwant %x", i, buf, want)
		}
		var back fsmpb.Message
		if err := proto.Unmarshal(buf, &back); err != nil {
			t.Fatalf("case %d: unmarshal: %v", i, err)
		}
		if !proto.Equal(&back, m.toProto(true)) {
			t.Fatalf("case %d: round trip changed the message", i)
		}
	}
}

// Invalid UTF-8 cannot come in through a command, but if it were in the
// state the snapshot would fail as proto.Marshal fails, not write a record
// restore refuses.
func TestMessageRecordRefusesInvalidUTF8(t *testing.T) {
	bad := "ok\xff"
	q := &queue{name: "q"}
	for name, m := range map[string]*msg{
		"type":           {id: 1, q: q, typ: bad},
		"attribute key":  {id: 1, q: q, attrs: []kv{{k: bad, v: "v"}}},
		"attribute val":  {id: 1, q: q, attrs: []kv{{k: "k", v: bad}}},
		"history error":  {id: 1, q: q, history: []attempt{{epoch: 1, err: bad}}},
		"history client": {id: 1, q: q, history: []attempt{{epoch: 1, consumer: bad}}},
	} {
		if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m.toProto(true)); err == nil {
			t.Fatalf("%s: proto.Marshal accepted invalid UTF-8; the test's premise is wrong", name)
		}
		if _, err := appendMessageRecord(nil, m, false); !errors.Is(err, errInvalidUTF8) {
			t.Errorf("%s: err = %v, want errInvalidUTF8", name, err)
		}
	}
}
