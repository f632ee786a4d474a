// Package ledger books what a test's clients were told about every send,
// delivery and ack, and judges the history against the delivery contract
// (README.md, docs/fsm.md):
//
//   - every acknowledged send is delivered (durable before ack,
//     at-least-once);
//   - a send is stored once: with dedup keys, every delivery of one body
//     carries the message id its send was answered with;
//   - a message whose ack the server confirmed is never delivered again;
//   - a message is delivered again only after its previous lease ended:
//     its redelivery's receive call returned no earlier than the previous
//     receive call started plus the visibility timeout (the lease was
//     granted after that call started, and grace after a leader change
//     only lengthens it);
//   - nothing is delivered that was never sent.
//
// Sends whose call failed have an unknown outcome: they may or may not be
// delivered and are never counted lost. Acks that failed (or whose outcome
// is unknown) allow the message to come back, after its lease.
package ledger

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Ledger is safe for concurrent use.
type Ledger struct {
	visibility time.Duration

	mu    sync.Mutex
	sends map[string]*send  // body -> send
	msgs  map[string]*entry // message id -> deliveries
	// foreign are deliveries of bodies never attempted.
	foreign []string
	// leaseEnd is the latest time a lease the ledger saw may run to
	// (receive call end + visibility): until then a message may still come
	// back.
	leaseEnd time.Time
	// seqs are the FIFO sequences whose order Check judges (order.go).
	seqs map[string][]string
}

type send struct {
	state sendState
	id    string            // the id the send was answered with
	ids   map[string]string // message ids seen for this body -> where first seen
	// delivered counts the receives that returned this body; firstEnd is
	// when the first of them returned.
	delivered int
	firstEnd  time.Time
}

type sendState uint8

const (
	sendPending sendState = iota // attempted, no answer yet
	sendAcked
	sendUnknown // the call failed: maybe stored, maybe not
)

type entry struct {
	body string
	// leases by epoch, in the order the epochs were granted.
	leases []*lease
	// settled: the server said the message is acked (an ack confirmed, or
	// its state read back as ACKED after an ack with an unknown outcome).
	settled bool
}

type lease struct {
	epoch      uint64
	callStart  time.Time
	callEnd    time.Time
	ack        ackState
	ackErr     string
	deliveries int // receives that returned this epoch (more than one is a bug)
}

type ackState uint8

const (
	ackNone ackState = iota
	ackConfirmed
	ackFailed
)

// New returns an empty ledger for a queue whose leases last visibility.
func New(visibility time.Duration) *Ledger {
	return &Ledger{visibility: visibility, sends: map[string]*send{}, msgs: map[string]*entry{}, seqs: map[string][]string{}}
}

// Visibility is the lease length the ledger judges redeliveries by.
func (l *Ledger) Visibility() time.Duration { return l.visibility }

// Attempt books a send about to be made. Every body must be unique.
func (l *Ledger) Attempt(body string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.sends[body]; !ok {
		l.sends[body] = &send{ids: map[string]string{}}
	}
}

// Sent books a send's answer: err == nil means it was acknowledged as
// message id.
func (l *Ledger) Sent(body, id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sends[body]
	if !ok {
		s = &send{ids: map[string]string{}}
		l.sends[body] = s
	}
	if err != nil {
		if s.state != sendAcked {
			s.state = sendUnknown
		}
		return
	}
	s.state, s.id = sendAcked, id
	if _, seen := s.ids[id]; !seen {
		s.ids[id] = "send answer"
	}
}

// Delivery is one message a receive call returned.
type Delivery struct {
	Body  string
	ID    string
	Epoch uint64
	// CallStart and CallEnd bound the receive call that returned it.
	CallStart, CallEnd time.Time
}

// Delivered books one delivery.
func (l *Ledger) Delivered(d Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if end := d.CallEnd.Add(l.visibility); end.After(l.leaseEnd) {
		l.leaseEnd = end
	}
	s, ok := l.sends[d.Body]
	if !ok {
		l.foreign = append(l.foreign, fmt.Sprintf("%s (%s)", d.Body, d.ID))
		return
	}
	if s.delivered == 0 || d.CallEnd.Before(s.firstEnd) {
		s.firstEnd = d.CallEnd
	}
	s.delivered++
	if _, seen := s.ids[d.ID]; !seen {
		s.ids[d.ID] = "delivery"
	}
	e, ok := l.msgs[d.ID]
	if !ok {
		e = &entry{body: d.Body}
		l.msgs[d.ID] = e
	}
	for _, ls := range e.leases {
		if ls.epoch == d.Epoch {
			ls.deliveries++
			return
		}
	}
	e.leases = append(e.leases, &lease{epoch: d.Epoch, callStart: d.CallStart, callEnd: d.CallEnd, deliveries: 1})
	slices.SortFunc(e.leases, func(a, b *lease) int { return cmp.Compare(a.epoch, b.epoch) })
}

// Acked books the outcome of an ack of message id's lease epoch: err ==
// nil means the server confirmed it (already_acked included).
func (l *Ledger) Acked(id string, epoch uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.msgs[id]
	if !ok {
		return
	}
	for _, ls := range e.leases {
		if ls.epoch != epoch {
			continue
		}
		if err == nil {
			ls.ack = ackConfirmed
			e.settled = true
		} else if ls.ack != ackConfirmed {
			ls.ack, ls.ackErr = ackFailed, err.Error()
		}
	}
}

// Settled books that the server reports message id as acked, although no
// ack of it was confirmed to the client (its outcome was unknown).
func (l *Ledger) Settled(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.msgs[id]; ok {
		e.settled = true
	}
}

// Pending is what is not finished yet: acknowledged sends never delivered
// (bodies), and delivered messages that are not settled (ids).
func (l *Ledger) Pending() (undelivered, unsettled []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for body, s := range l.sends {
		if s.state == sendAcked && s.delivered == 0 {
			undelivered = append(undelivered, body)
		}
	}
	for id, e := range l.msgs {
		if !e.settled {
			unsettled = append(unsettled, id)
		}
	}
	slices.Sort(undelivered)
	slices.Sort(unsettled)
	return undelivered, unsettled
}

// failedAcks lists up to n unsettled messages whose last lease's ack
// failed: the ones an unknown outcome may have settled.
func (l *Ledger) failedAcks(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, e := range l.msgs {
		if len(out) == n {
			break
		}
		if !e.settled && len(e.leases) > 0 && e.leases[len(e.leases)-1].ack == ackFailed {
			out = append(out, id)
		}
	}
	return out
}

// LeaseEnd is the latest time a lease the ledger saw may last to.
func (l *Ledger) LeaseEnd() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leaseEnd
}

// Verdict is the ledger's judgement of the history.
type Verdict struct {
	Attempted, AckedSends, UnknownSends int
	Messages                            int // distinct message ids delivered
	Deliveries                          int
	Redeliveries                        int // deliveries of a message after its first
	AcksConfirmed, AcksFailed           int

	Lost        []string // acknowledged sends never delivered
	Duplicated  []string // bodies stored under more than one message id
	Resurrected []string // messages delivered again after a confirmed ack
	Early       []string // redeliveries before the previous lease could have ended
	Repeated    []string // one lease epoch returned by two receives
	Foreign     []string // deliveries of bodies never sent
	OutOfOrder  []string // FIFO sequences delivered out of send order (order.go)
}

// Check judges the history booked so far.
func (l *Ledger) Check() Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := Verdict{Attempted: len(l.sends), Foreign: slices.Clone(l.foreign)}
	for body, s := range l.sends {
		switch s.state {
		case sendAcked:
			v.AckedSends++
			if s.delivered == 0 {
				v.Lost = append(v.Lost, body)
			}
		case sendUnknown:
			v.UnknownSends++
		}
		if len(s.ids) > 1 {
			var ids []string
			for id, how := range s.ids {
				ids = append(ids, id+" ("+how+")")
			}
			slices.Sort(ids)
			v.Duplicated = append(v.Duplicated, fmt.Sprintf("%s as %s", body, strings.Join(ids, ", ")))
		}
	}
	for id, e := range l.msgs {
		v.Messages++
		for i, ls := range e.leases {
			v.Deliveries += ls.deliveries
			switch ls.ack {
			case ackConfirmed:
				v.AcksConfirmed++
			case ackFailed:
				v.AcksFailed++
			}
			if ls.deliveries > 1 {
				v.Repeated = append(v.Repeated, fmt.Sprintf("%s epoch %d returned %d times", id, ls.epoch, ls.deliveries))
			}
			if i == 0 {
				continue
			}
			v.Redeliveries++
			prev := e.leases[i-1]
			if prev.ack == ackConfirmed {
				v.Resurrected = append(v.Resurrected, fmt.Sprintf("%s (%s): ack of epoch %d confirmed, delivered again as epoch %d", id, e.body, prev.epoch, ls.epoch))
				continue
			}
			if earliest := prev.callStart.Add(l.visibility); ls.callEnd.Before(earliest) {
				v.Early = append(v.Early, fmt.Sprintf("%s (%s): epoch %d returned %v before epoch %d's lease of %v could end (ack: %s)",
					id, e.body, ls.epoch, earliest.Sub(ls.callEnd).Round(time.Millisecond), prev.epoch, l.visibility, ackText(prev)))
			}
		}
	}
	v.OutOfOrder = l.outOfOrder()
	for _, s := range [][]string{v.Lost, v.Duplicated, v.Resurrected, v.Early, v.Repeated, v.Foreign, v.OutOfOrder} {
		slices.Sort(s)
	}
	return v
}

func ackText(ls *lease) string {
	switch ls.ack {
	case ackConfirmed:
		return "confirmed"
	case ackFailed:
		return "failed: " + ls.ackErr
	}
	return "none"
}

// Err is nil when the history keeps the contract, else one error naming
// every violation (the first few of each kind).
func (v Verdict) Err() error {
	var parts []string
	add := func(kind string, items []string) {
		if len(items) == 0 {
			return
		}
		shown := items[:min(len(items), 5)]
		parts = append(parts, fmt.Sprintf("%d %s: %s", len(items), kind, strings.Join(shown, "; ")))
	}
	add("acknowledged sends lost", v.Lost)
	add("sends stored twice", v.Duplicated)
	add("messages delivered again after a confirmed ack", v.Resurrected)
	add("redeliveries before the lease ended", v.Early)
	add("lease epochs returned twice", v.Repeated)
	add("deliveries of bodies never sent", v.Foreign)
	add("FIFO groups delivered out of send order", v.OutOfOrder)
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("ledger: %s", strings.Join(parts, "; "))
}

// String summarises the counts.
func (v Verdict) String() string {
	return fmt.Sprintf("%d sends attempted, %d acknowledged, %d with unknown outcome; %d messages delivered %d times (%d redeliveries); consumer acks %d confirmed, %d failed",
		v.Attempted, v.AckedSends, v.UnknownSends, v.Messages, v.Deliveries, v.Redeliveries, v.AcksConfirmed, v.AcksFailed)
}
