package ledger

import "fmt"

// On a FIFO queue the messages of one group are delivered in the order
// they were stored, one at a time: the next is leased only once the one
// before was acked. A producer that sends a group's messages one after
// another, each only once the one before was acknowledged, knows that
// order. The ledger checks it per sequence: of two acknowledged sends a
// then b of one sequence, b must not be delivered unless a was, and b's
// first delivery must return after a's first did (b's lease is granted
// after a's ack, which the consumer sent after a receive returned a).
// Sends with an unknown outcome are left out: where they were stored is
// not known.

// Sequenced books body, already Attempted, as the next send of the FIFO
// sequence seq (a producer's group). The caller attempts it only after the
// sequence's previous send was answered.
func (l *Ledger) Sequenced(seq, body string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seqs[seq] = append(l.seqs[seq], body)
}

// outOfOrder lists the sequences whose acknowledged sends were delivered
// out of order; l.mu is held.
func (l *Ledger) outOfOrder() []string {
	var out []string
	for seq, bodies := range l.seqs {
		var prev string
		var ps *send
		for _, b := range bodies {
			s := l.sends[b]
			if s == nil || s.state != sendAcked {
				continue
			}
			if ps != nil && s.delivered > 0 {
				switch {
				case ps.delivered == 0:
					out = append(out, fmt.Sprintf("%s: %s delivered, the earlier %s never", seq, b, prev))
				case !s.firstEnd.After(ps.firstEnd):
					out = append(out, fmt.Sprintf("%s: %s first delivered %v before the earlier %s", seq, b, ps.firstEnd.Sub(s.firstEnd), prev))
				}
			}
			prev, ps = b, s
		}
	}
	return out
}
