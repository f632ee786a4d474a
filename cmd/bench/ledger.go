package main

import (
	"fmt"
	"sync"
)

// ledger books every send and every delivery by (producer, seq). After a
// drain, an acknowledged send with no delivery is lost; a second delivery
// of one message is a duplicate (allowed by at-least-once after a lease
// expiry, but counted). A send whose outcome is unknown (the call failed) may
// or may not arrive and is never counted lost. A send the cluster refused
// (RESOURCE_EXHAUSTED: nothing was applied) must never arrive: a delivery
// of one is counted, as a refusal that stored the message after all.
type ledger struct {
	mu        sync.Mutex
	producers []producerBook
	foreign   uint64 // deliveries that are not ours or name a seq never sent
	// waiting counts acked sends not delivered yet, kept up to date so the
	// drain loop can poll it without a scan.
	waiting uint64
}

type producerBook struct {
	next      uint64  // seqs below next were handed out
	state     []uint8 // per seq: sendState
	delivered []uint8 // per seq: deliveries, saturating at 255
}

type sendState uint8

const (
	sendPending sendState = iota
	sendAcked
	sendUnknown // the call failed: the message may or may not be stored
	sendRefused // the cluster refused it: not stored
)

func newLedger(producers int) *ledger {
	return &ledger{producers: make([]producerBook, producers)}
}

// next reserves the next sequence number of producer p.
func (l *ledger) next(p int) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.producers[p]
	s := b.next
	b.next++
	b.state = append(b.state, uint8(sendPending))
	b.delivered = append(b.delivered, 0)
	return s
}

// nextN reserves n consecutive sequence numbers of producer p and returns
// the first: one lock for a batch.
func (l *ledger) nextN(p, n int) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.producers[p]
	s := b.next
	b.next += uint64(n)
	for range n {
		b.state = append(b.state, uint8(sendPending))
		b.delivered = append(b.delivered, 0)
	}
	return s
}

// sent books the outcome of a send: acked (stored on a quorum) or not.
func (l *ledger) sent(p int, seq uint64, acked bool) {
	st := sendUnknown
	if acked {
		st = sendAcked
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(p, seq, st)
}

// book books the outcome of each of seqs, states[i] for seqs[i], under one
// lock: a batch's items.
func (l *ledger) book(p int, seqs []uint64, states []sendState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range seqs {
		l.setLocked(p, s, states[i])
	}
}

func (l *ledger) setLocked(p int, seq uint64, st sendState) {
	b := &l.producers[p]
	b.state[seq] = uint8(st)
	if st == sendAcked && b.delivered[seq] == 0 {
		l.waiting++
	}
}

// outstanding is the number of acked sends not delivered yet.
func (l *ledger) outstanding() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// delivered books one delivery and reports whether it was the first of
// that message (false: duplicate or foreign).
func (l *ledger) delivered(h header) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if int(h.Producer) >= len(l.producers) || h.Seq >= l.producers[h.Producer].next {
		l.foreign++
		return false
	}
	b := &l.producers[h.Producer]
	d := &b.delivered[h.Seq]
	if *d < 255 {
		*d++
	}
	if *d == 1 && sendState(b.state[h.Seq]) == sendAcked {
		l.waiting--
	}
	return *d == 1
}

// tally is the ledger's verdict.
type tally struct {
	Acked      uint64 `json:"acked_sends"`
	Unknown    uint64 `json:"unknown_sends"`
	Delivered  uint64 `json:"delivered_unique"`
	Duplicates uint64 `json:"duplicate_deliveries"`
	Lost       uint64 `json:"lost"`
	Foreign    uint64 `json:"foreign"`
	// Refused sends were turned away (RESOURCE_EXHAUSTED) and must never
	// be delivered; RefusedDelivered counts those that were.
	Refused          uint64 `json:"refused_sends,omitempty"`
	RefusedDelivered uint64 `json:"refused_delivered,omitempty"`
}

func (l *ledger) tally() tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := tally{Foreign: l.foreign}
	for _, b := range l.producers {
		for i, st := range b.state {
			d := uint64(b.delivered[i])
			if d > 0 {
				t.Delivered++
				t.Duplicates += d - 1
			}
			switch sendState(st) {
			case sendAcked:
				t.Acked++
				if d == 0 {
					t.Lost++
				}
			case sendUnknown:
				t.Unknown++
			case sendRefused:
				t.Refused++
				if d > 0 {
					t.RefusedDelivered++
				}
			}
		}
	}
	return t
}

// missing lists up to n acked-but-undelivered messages as "p/seq", for the
// report when something is lost.
func (l *ledger) missing(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p, b := range l.producers {
		for i, st := range b.state {
			if sendState(st) == sendAcked && b.delivered[i] == 0 {
				if len(out) == n {
					return out
				}
				out = append(out, fmt.Sprintf("%d/%d", p, i))
			}
		}
	}
	return out
}
