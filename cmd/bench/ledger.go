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
//
// A send to a topic is due once on every subscription: the ledger then
// books copies deliveries of each send, one per subscription (copy i is
// subscription i's), and every count below is of copies.
type ledger struct {
	mu        sync.Mutex
	copies    int // deliveries each acked send is due: 1, or a topic's subscriptions
	producers []producerBook
	foreign   uint64 // deliveries that are not ours or name a seq never sent
	// waiting counts acked copies not delivered yet, kept up to date so
	// the drain loop can poll it without a scan.
	waiting uint64
}

type producerBook struct {
	next  uint64  // seqs below next were handed out
	state []uint8 // per seq: sendState
	// delivered is per seq and copy (index seq*copies+copy): deliveries,
	// saturating at 255.
	delivered []uint8
}

type sendState uint8

const (
	sendPending sendState = iota
	sendAcked
	sendUnknown // the call failed: the message may or may not be stored
	sendRefused // the cluster refused it: not stored
)

func newLedger(producers int) *ledger {
	return newFanLedger(producers, 1)
}

// newFanLedger is a ledger of sends each due on copies subscriptions.
func newFanLedger(producers, copies int) *ledger {
	return &ledger{producers: make([]producerBook, producers), copies: max(copies, 1)}
}

// grow books one more seq of b with no delivery yet.
func (l *ledger) grow(b *producerBook) {
	b.state = append(b.state, uint8(sendPending))
	for range l.copies {
		b.delivered = append(b.delivered, 0)
	}
}

// next reserves the next sequence number of producer p.
func (l *ledger) next(p int) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.producers[p]
	s := b.next
	b.next++
	l.grow(b)
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
		l.grow(b)
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
	if st != sendAcked {
		return
	}
	for _, d := range b.delivered[int(seq)*l.copies:][:l.copies] {
		if d == 0 {
			l.waiting++
		}
	}
}

// outstanding is the number of acked copies not delivered yet (of a plain
// queue's sends: acked sends).
func (l *ledger) outstanding() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiting
}

// delivered books one delivery and reports whether it was the first of
// that message (false: duplicate or foreign).
func (l *ledger) delivered(h header) bool {
	return l.deliveredCopy(0, h)
}

// deliveredCopy books one delivery of copy c (subscription c's) and
// reports whether it was that copy's first (false: duplicate or foreign).
func (l *ledger) deliveredCopy(c int, h header) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c < 0 || c >= l.copies || int(h.Producer) >= len(l.producers) || h.Seq >= l.producers[h.Producer].next {
		l.foreign++
		return false
	}
	b := &l.producers[h.Producer]
	d := &b.delivered[int(h.Seq)*l.copies+c]
	if *d < 255 {
		*d++
	}
	if *d == 1 && sendState(b.state[h.Seq]) == sendAcked {
		l.waiting--
	}
	return *d == 1
}

// foreignDelivery books a delivery that is not a bench payload.
func (l *ledger) foreignDelivery() {
	l.mu.Lock()
	l.foreign++
	l.mu.Unlock()
}

// tally is the ledger's verdict. Acked, Unknown and Refused count sends;
// the rest count copies (of a plain queue's sends, the sends themselves).
type tally struct {
	Acked   uint64 `json:"acked_sends"`
	Unknown uint64 `json:"unknown_sends"`
	// Copies is the deliveries each acked send was due, when more than one.
	Copies     int    `json:"copies,omitempty"`
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
	if l.copies > 1 {
		t.Copies = l.copies
	}
	for _, b := range l.producers {
		for i, st := range b.state {
			switch sendState(st) {
			case sendAcked:
				t.Acked++
			case sendUnknown:
				t.Unknown++
			case sendRefused:
				t.Refused++
			}
			for _, dc := range b.delivered[i*l.copies:][:l.copies] {
				d := uint64(dc)
				if d > 0 {
					t.Delivered++
					t.Duplicates += d - 1
				}
				switch sendState(st) {
				case sendAcked:
					if d == 0 {
						t.Lost++
					}
				case sendRefused:
					if d > 0 {
						t.RefusedDelivered++
					}
				}
			}
		}
	}
	return t
}

// missing lists up to n acked-but-undelivered messages as "p/seq" (of a
// topic's sends, copies as "p/seq@copy"), for the report when something is
// lost.
func (l *ledger) missing(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p, b := range l.producers {
		for i, st := range b.state {
			if sendState(st) != sendAcked {
				continue
			}
			for c, d := range b.delivered[i*l.copies:][:l.copies] {
				if d != 0 {
					continue
				}
				if len(out) == n {
					return out
				}
				if l.copies == 1 {
					out = append(out, fmt.Sprintf("%d/%d", p, i))
				} else {
					out = append(out, fmt.Sprintf("%d/%d@%d", p, i, c))
				}
			}
		}
	}
	return out
}
