package server

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
)

func mustKeys(t *testing.T, secrets ...[]byte) *ReceiptKeys {
	t.Helper()
	k, err := NewReceiptKeys(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestReceiptSignatures(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	keys := mustKeys(t, k1)
	r := keys.Sign(wire.Receipt{Shard: 2, ID: 41, Epoch: 7, Term: 3})
	// Through its text form, as a client hands it back.
	back, err := wire.ParseReceipt(r.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Verify(back); err != nil {
		t.Fatalf("own receipt: %v", err)
	}
	for name, bad := range map[string]wire.Receipt{
		"another epoch":   func() wire.Receipt { x := back; x.Epoch++; return x }(),
		"another message": func() wire.Receipt { x := back; x.ID++; return x }(),
		"another shard":   func() wire.Receipt { x := back; x.Shard++; return x }(),
		"a flipped bit":   func() wire.Receipt { x := back; x.Sig[0] ^= 1; return x }(),
		"unsigned":        {Shard: 2, ID: 41, Epoch: 7, Term: 3},
		"another cluster": mustKeys(t, k2).Sign(wire.Receipt{Shard: 2, ID: 41, Epoch: 7, Term: 3}),
	} {
		if err := keys.Verify(bad); !errors.Is(err, ErrReceiptSignature) {
			t.Errorf("%s: %v, want a signature refusal", name, err)
		}
	}
	// Rotation: k2 signs from now on; receipts of k1 stay good while k1 is
	// held, and are refused once it is dropped.
	rotated := mustKeys(t, k2, k1)
	if err := rotated.Verify(back); err != nil {
		t.Fatalf("k1's receipt after k2 came first: %v", err)
	}
	if fresh := rotated.Sign(wire.Receipt{Shard: 0, ID: 1, Epoch: 1}); fresh.Key == back.Key {
		t.Fatal("the rotated keys still sign with k1")
	}
	err = mustKeys(t, k2).Verify(back)
	if !errors.Is(err, ErrReceiptSignature) || !strings.Contains(err.Error(), "no longer holds") {
		t.Fatalf("k1's receipt once k1 is dropped: %v", err)
	}
}

func TestHideLiveLease(t *testing.T) {
	leased := &raftqv1.Message{State: raftqv1.State_STATE_LEASED, LeaseEpoch: 9,
		History: []*raftqv1.Attempt{{LeaseEpoch: 4, EndedMs: 100}, {LeaseEpoch: 9}}}
	hideLiveLease(leased)
	if leased.LeaseEpoch != 0 || leased.History[1].LeaseEpoch != 0 || leased.History[0].LeaseEpoch != 4 {
		t.Fatalf("leased record after hiding: epoch %d, history %v", leased.LeaseEpoch, leased.History)
	}
	ready := &raftqv1.Message{State: raftqv1.State_STATE_READY, LeaseEpoch: 9}
	hideLiveLease(ready)
	if ready.LeaseEpoch != 9 {
		t.Fatal("an ended lease's epoch was hidden")
	}
}

// BenchmarkReceiptSignVerify is what a signed receipt adds to a message's
// path: one Sign when it is received, one parse and Verify when it is
// acked (docs/benchmarks.md, "Component benchmarks").
func BenchmarkReceiptSignVerify(b *testing.B) {
	keys, err := NewReceiptKeys([][]byte{bytes.Repeat([]byte{1}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := range b.N {
		s := keys.Sign(wire.Receipt{Shard: 1, ID: uint64(i) + 1, Epoch: uint64(i) + 1, Term: 3}).String()
		r, err := wire.ParseReceipt(s)
		if err != nil {
			b.Fatal(err)
		}
		if err := keys.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}
