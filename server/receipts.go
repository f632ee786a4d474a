package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
)

// ReceiptKeys sign the receipts a node hands out and check the ones it is
// given back, so that only the consumer that received a message can settle
// or extend its lease: a receipt cannot be made from a message id and an
// epoch. The keys derive from the cluster's gossip keys, the one secret
// every member already holds (and rotates: the first key signs, every key
// verifies), so a receipt signed by one node settles through any other and
// nothing secret enters the raft log or a backup.
type ReceiptKeys struct {
	sign receiptKey
	all  map[uint32]receiptKey
}

type receiptKey struct {
	id  uint32
	mac []byte
}

// receiptKeyLabel separates the receipt keys from any other use of the
// gossip keys.
const receiptKeyLabel = "raftq receipt signing key v1"

// NewReceiptKeys derives the receipt keys of secrets; the first signs.
func NewReceiptKeys(secrets [][]byte) (*ReceiptKeys, error) {
	if len(secrets) == 0 {
		return nil, errors.New("receipt keys: no secret")
	}
	k := &ReceiptKeys{all: make(map[uint32]receiptKey, len(secrets))}
	for i, s := range secrets {
		h := hmac.New(sha256.New, s)
		h.Write([]byte(receiptKeyLabel))
		mac := h.Sum(nil)
		sum := sha256.Sum256(mac)
		rk := receiptKey{id: binary.BigEndian.Uint32(sum[:4]), mac: mac}
		if i == 0 {
			k.sign = rk
		}
		k.all[rk.id] = rk
	}
	return k, nil
}

// Sign returns r signed with the first key.
func (k *ReceiptKeys) Sign(r wire.Receipt) wire.Receipt {
	r.Signed, r.Key = true, k.sign.id
	copy(r.Sig[:], k.sign.sum(r))
	return r
}

// ErrReceiptSignature: a receipt this node cannot vouch for.
var ErrReceiptSignature = errors.New("receipt signature")

// Verify checks r's signature against every key held.
func (k *ReceiptKeys) Verify(r wire.Receipt) error {
	if !r.Signed {
		return fmt.Errorf("%w: the receipt is not signed (from a node run with --insecure, or made by hand)", ErrReceiptSignature)
	}
	rk, ok := k.all[r.Key]
	if !ok {
		return fmt.Errorf("%w: signed with a key this node no longer holds (rotated out of the gossip key file); the message comes back once its lease ends", ErrReceiptSignature)
	}
	if !hmac.Equal(r.Sig[:], rk.sum(r)) {
		return fmt.Errorf("%w: does not match: the receipt was altered or forged", ErrReceiptSignature)
	}
	return nil
}

func (rk receiptKey) sum(r wire.Receipt) []byte {
	h := hmac.New(sha256.New, rk.mac)
	h.Write(r.SignedBytes())
	return h.Sum(nil)[:wire.SigLen]
}

// hideLiveLease leaves the epoch of a lease still held out of a message
// record: the receipt's signature is what protects the lease, and the
// epoch is the holder's fencing token, none of a reader's business.
// Ended attempts keep theirs, for the history.
func hideLiveLease(m *raftqv1.Message) {
	if m == nil || m.GetState() != raftqv1.State_STATE_LEASED {
		return
	}
	m.LeaseEpoch = 0
	if h := m.GetHistory(); len(h) > 0 && h[len(h)-1].GetEndedMs() == 0 {
		h[len(h)-1].LeaseEpoch = 0
	}
}
