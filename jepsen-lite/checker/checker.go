package checker

import (
	"fmt"
	"sort"
	"strings"

	"github.com/raftq/raftq/jepsen-lite/history"
	"github.com/raftq/raftq/wire"
)

// maxExamples bounds the violations quoted per checker.
const maxExamples = 20

// Result is one checker's verdict.
type Result struct {
	Name  string         `json:"name"`
	Valid bool           `json:"valid"`
	Count map[string]int `json:"counts"`
	// Violations quotes the first few problems found.
	Violations []string `json:"violations,omitempty"`
	// Notes are observations that are not violations.
	Notes []string `json:"notes,omitempty"`
}

func newResult(name string) *Result {
	return &Result{Name: name, Valid: true, Count: map[string]int{}}
}

func (r *Result) violate(kind, format string, args ...any) {
	r.Valid = false
	r.Count[kind]++
	if len(r.Violations) < maxExamples {
		r.Violations = append(r.Violations, kind+": "+fmt.Sprintf(format, args...))
	}
}

// Summary is one line: name, verdict and counts in a stable order.
func (r Result) Summary() string {
	keys := make([]string, 0, len(r.Count))
	for k := range r.Count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	verdict := "ok"
	if !r.Valid {
		verdict = "VIOLATED"
	}
	fmt.Fprintf(&b, "%-12s %-8s", r.Name, verdict)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, r.Count[k])
	}
	return b.String()
}

// Options tune the checkers to the run.
type Options struct {
	// FIFOQueues names queues whose groups must be delivered in order,
	// besides those the history's setup marks FIFO.
	FIFOQueues map[string]bool
}

// DefaultClockBoundMs is the nodes' default --max-clock-offset, assumed
// for a history without a setup.
const DefaultClockBoundMs = 500

// Check runs every checker over ops.
func Check(ops []history.Op, opt Options) []Result {
	ix := build(ops)
	ls := ix.leases()
	fifo := map[string]bool{}
	for q, ok := range opt.FIFOQueues {
		fifo[q] = ok
	}
	if ix.setup != nil {
		for _, q := range ix.setup.Queues {
			fifo[q.Name] = fifo[q.Name] || q.FIFO
		}
	}
	opt.FIFOQueues = fifo
	return []Result{
		*totalQueue(ix),
		*leaseExclusive(ix, ls),
		*groupOrder(ix, ls, opt),
		*dedup(ix),
		*staleAck(ix, ls),
		*quotaCheck(ix),
		*finalPhase(ix),
		*nemesisCheck(ix),
		*cronCheck(ops),
		*fanoutCheck(ix, ls),
	}
}

// Valid reports whether every result holds.
func Valid(rs []Result) bool {
	for _, r := range rs {
		if !r.Valid {
			return false
		}
	}
	return true
}

// ackedEpochs maps message id to the epochs of successful acks.
func (ix *index) ackedEpochs() map[string][]leaseOp {
	out := map[string][]leaseOp{}
	for _, o := range ix.leaseOps {
		if o.f == history.FAck && o.typ == history.OK {
			out[o.msg] = append(out[o.msg], o)
		}
	}
	return out
}

// totalQueue: every acknowledged enqueue is eventually delivered and acked,
// or dead-lettered; nothing appears that nobody sent; an ack is final.
func totalQueue(ix *index) *Result {
	r := newResult("total-queue")
	delivered := map[string]bool{} // by value
	firstEpoch := map[string]uint64{}
	for _, d := range ix.deliveries {
		r.Count["deliveries"]++
		delivered[d.Value] = true
		if e, ok := firstEpoch[d.MessageID]; !ok || d.Epoch < e {
			firstEpoch[d.MessageID] = d.Epoch
		}
		// A subscription's copies carry published values: checker
		// fanout matches them with their publishes.
		if _, known := ix.enq[d.Value]; !known && ix.subs[d.queue] == nil {
			r.violate("unexpected", "delivery of %s (value %q) that no client enqueued", d.MessageID, d.Value)
		}
	}
	for _, d := range ix.deliveries {
		if d.Epoch > firstEpoch[d.MessageID] {
			r.Count["redelivered"]++ // after expiry or nack: allowed
		}
	}
	acked := map[string]bool{} // by message id: a client ack succeeded
	for id, os := range ix.ackedEpochs() {
		acked[id] = len(os) > 0
	}
	// asked: a client ack succeeded or may have (info): the only ways a
	// message may become ACKED.
	asked := map[string]bool{}
	for _, o := range ix.leaseOps {
		if o.f == history.FAck && o.typ != history.Fail {
			asked[o.msg] = true
		}
	}
	// Resurrection: a delivery whose epoch is later than a successful ack
	// that completed before the receive was even sent.
	ackOps := ix.ackedEpochs()
	for _, d := range ix.deliveries {
		for _, a := range ackOps[d.MessageID] {
			if a.epoch < d.Epoch && a.complet < d.invoke {
				r.violate("resurrected", "%s acked (epoch %d, process %d, done at %s) then delivered again (epoch %d, process %d, sent at %s)",
					d.MessageID, a.epoch, a.process, ms(a.complet), d.Epoch, d.process, ms(d.invoke))
			}
		}
	}
	// Resurrection on the server's word: an attempt after an acked one; a
	// delivery of a later epoch than the server says was acked; a final
	// state other than ACKED for a message a client's ack was confirmed
	// for.
	serverAcked := map[string]uint64{} // message id -> epoch the server records as acked
	for id, rec := range ix.finals {
		seenAck := false
		for _, a := range rec.Attempts {
			if seenAck {
				r.violate("resurrected", "%s: server history has attempt epoch %d after an acked attempt", id, a.Epoch)
				break
			}
			if a.Outcome == history.OutAcked {
				seenAck = true
				serverAcked[id] = a.Epoch
			}
		}
		if acked[id] && rec.State != history.StateAcked {
			r.violate("resurrected", "%s: a client's ack was confirmed, yet the server's final record says %s", id, rec.State)
		}
	}
	for _, d := range ix.deliveries {
		if e, ok := serverAcked[d.MessageID]; ok && d.Epoch > e {
			r.violate("resurrected", "%s: the server records epoch %d as acked, yet epoch %d reached process %d", d.MessageID, e, d.Epoch, d.process)
		}
	}
	maxReceives := map[string]uint32{}
	if ix.setup != nil {
		for _, q := range ix.setup.Queues {
			maxReceives[q.Name] = q.MaxReceives
		}
	}
	for _, e := range ix.enqOrder {
		r.Count["enqueue-"+e.status]++
		finished, dead, live := false, false, false
		for id := range e.ids {
			if acked[id] {
				finished = true
			}
			if ix.dead[id] {
				dead = true
			}
			if rec := ix.finals[id]; rec != nil {
				switch rec.State {
				case history.StateAcked:
					if asked[id] {
						finished = true
					} else {
						r.violate("phantom-ack", "%s (value %q): the server says ACKED, but no client ack of it succeeded or may have", id, e.value)
					}
				case history.StateDead:
					dead = true
				default:
					live = true
				}
			}
			if ix.dead[id] || ix.finals[id] != nil && ix.finals[id].State == history.StateDead {
				deadEarly(r, ix, id, e, maxReceives)
			}
		}
		switch e.status {
		case history.OK:
			switch {
			case finished:
				r.Count["acked"]++
			case dead:
				r.Count["dead-lettered"]++
			case !ix.finalDone():
				r.Count["unconfirmed"]++ // no completed final phase: checker final fails the run
			case !delivered[e.value]:
				r.violate("lost", "value %q (ids %v) enqueued ok at %s, never delivered, not in a DLQ", e.value, keys(e.ids), ms(e.lastOK))
			default:
				r.violate("unfinished", "value %q (ids %v) delivered but neither acked nor dead-lettered after the final drain (server state live: %v)", e.value, keys(e.ids), live)
			}
		case history.Info:
			if delivered[e.value] || finished || dead {
				r.Count["recovered-indeterminate"]++
			} else {
				r.Count["lost-indeterminate"]++ // allowed: the enqueue may never have happened
			}
		case history.Fail:
			if delivered[e.value] || finished || dead {
				r.violate("delivered-failed", "value %q: every enqueue attempt failed (certainly not applied), yet it exists (ids %v)", e.value, keys(e.ids))
			}
		}
	}
	return r
}

// deadEarly flags a dead-lettered message received fewer times than its
// queue's max receives: the workloads never dead-letter by hand (poison)
// and their retention outlasts any run, so running out of receives is the
// only way in.
func deadEarly(r *Result, ix *index, id string, e *enqueue, maxReceives map[string]uint32) {
	limit, known := maxReceives[e.queue]
	if !known {
		return
	}
	var n uint32
	reason := ""
	for _, rec := range []*history.Record{ix.finals[id], ix.deadRecs[id]} {
		if rec != nil {
			n = max(n, rec.ReceiveCount)
			if rec.DeadReason != "" {
				reason = rec.DeadReason
			}
		}
	}
	if n < limit {
		r.violate("dead-early", "%s (value %q) dead-lettered (%s) after %d receives; queue %s dead-letters after %d", id, e.value, reason, n, e.queue, limit)
	}
}

// leaseExclusive: at no instant of the shard clock do two leases of one
// message overlap, and no lease epoch is handed out twice.
func leaseExclusive(ix *index, ls map[string]map[uint64]*lease) *Result {
	r := newResult("lease")
	for id, m := range ls {
		eps := sortedEpochs(m)
		for _, l := range eps {
			r.Count["leases"]++
			if len(l.clients) > 1 {
				r.violate("epoch-twice", "%s epoch %d delivered to processes %v", id, l.epoch, l.clients)
			}
		}
		for j, later := range eps {
			if later.startMs < 0 {
				continue
			}
			for _, earlier := range eps[:j] {
				if until := earlier.validUntil(); until > 0 && later.startMs < until {
					r.violate("double-lease", "%s: epoch %d granted at %d while epoch %d (clients %v) was valid until %d (shard clock ms)",
						id, later.epoch, later.startMs, earlier.epoch, earlier.clients, until)
				}
			}
			if j > 0 {
				r.Count["regrants"]++
			}
		}
	}
	realTimeEarly(ix, r)
	return r
}

// realTimeMarginMs is added to twice the clock bound before a lease that
// ended early in real time is a violation: the clock check measures peer
// clocks give or take half a gossip round trip (docs/clock.md), which a loaded machine stretches. The harness's own delays
// need no margin: they only shrink the shortening it can see.
const realTimeMarginMs = 250

// realTimeEarly finds leases that ended early in real time: a later epoch
// reached a client before the earlier holder's receive was sent plus its
// visibility timeout, with no extension or settlement in between. That
// measure can only understate the shortening (the grant came after the
// send, the regrant before the answer). The contract is on the shard
// clock, which a leader whose clock runs ahead pushes ahead of real time;
// with the clock check no node beyond the bound B leads, so two leaders'
// clocks differ by at most 2B and a lease keeps its length within 2B
// (docs/clock.md). Shortening beyond 2B plus
// realTimeMarginMs is a violation (lease-shortened); less is noted.
func realTimeEarly(ix *index, r *Result) {
	type key struct {
		msg   string
		epoch uint64
	}
	allowed := ix.clockSlackMs() * 1e6
	touched := map[key]bool{}
	for _, o := range ix.leaseOps {
		if o.typ != history.Fail {
			touched[key{o.msg, o.epoch}] = true
		}
	}
	byMsg := map[string][]delivery{}
	for _, d := range ix.deliveries {
		byMsg[d.MessageID] = append(byMsg[d.MessageID], d)
	}
	for id, ds := range byMsg {
		sort.Slice(ds, func(i, j int) bool { return ds[i].Epoch < ds[j].Epoch })
		for j := 1; j < len(ds); j++ {
			a, b := ds[j-1], ds[j]
			if touched[key{id, a.Epoch}] || a.visMs <= 0 {
				continue
			}
			early := a.invoke + a.visMs*1e6 - b.complet
			if early <= 0 {
				continue
			}
			what := fmt.Sprintf("%s: epoch %d reached process %d %s before epoch %d's holder (process %d) could have seen its %d ms lease run out in real time", id, b.Epoch, b.process, ms(early), a.Epoch, a.process, a.visMs)
			if early > allowed {
				r.violate("lease-shortened", "%s; the clock bound allows %s", what, ms(allowed))
				continue
			}
			r.Count["early-expiry-realtime"]++
			if len(r.Notes) < maxExamples {
				r.Notes = append(r.Notes, what)
			}
		}
	}
}

// clockSlackMs is how far two leaders' clocks may differ, 2 × the clock
// bound, plus realTimeMarginMs for the clock check's own error.
func (ix *index) clockSlackMs() int64 {
	boundMs := int64(DefaultClockBoundMs)
	if ix.setup != nil && ix.setup.ClockBoundMs > 0 {
		boundMs = ix.setup.ClockBoundMs
	}
	return 2*boundMs + realTimeMarginMs
}

// staleAck: an ack that names an epoch older than a later delivery's must
// have been rejected.
func staleAck(ix *index, ls map[string]map[uint64]*lease) *Result {
	r := newResult("stale-ack")
	for _, o := range ix.leaseOps {
		if o.f != history.FAck {
			continue
		}
		var later *lease
		for e, l := range ls[o.msg] {
			if e > o.epoch && (later == nil || e < later.epoch) {
				later = l
			}
		}
		if later == nil {
			continue
		}
		switch o.typ {
		case history.OK:
			// A later epoch exists and this ack succeeded: either the ack was
			// applied to a lease already superseded, or the message came back
			// after an ack (the queue checker reports the clear-cut cases of
			// that; here every such pair counts).
			r.violate("stale-accepted", "ack of %s epoch %d (process %d) succeeded but epoch %d exists", o.msg, o.epoch, o.process, later.epoch)
		case history.Fail:
			r.Count["stale-rejected"]++
		default:
			r.Count["stale-unknown"]++
		}
	}
	for _, o := range ix.leaseOps {
		if o.f == history.FAck && o.typ == history.Fail {
			r.Count["ack-rejected"]++
		}
	}
	return r
}

// dedup: one dedup key never yields two message ids (runs stay inside the
// dedup window).
func dedup(ix *index) *Result {
	r := newResult("dedup")
	byKey := map[string]map[string]bool{}
	for _, e := range ix.enqOrder {
		if e.key == "" {
			continue
		}
		k := e.queue + "\x00" + e.key
		if byKey[k] == nil {
			byKey[k] = map[string]bool{}
		}
		for id := range e.ids {
			byKey[k][id] = true
		}
		if e.attempts > 1 {
			r.Count["retried-sends"]++
		}
	}
	for k, ids := range byKey {
		r.Count["keys"]++
		if len(ids) > 1 {
			q, key, _ := strings.Cut(k, "\x00")
			r.violate("dup-ids", "queue %s key %q yielded ids %v", q, key, keys(ids))
		}
	}
	return r
}

// groupOrder: in FIFO queues, a group's messages are leased in enqueue
// order, one at a time: every lease of an earlier message comes before any
// lease of a later one, and a later message is not leased while the
// earlier's lease is valid. Epochs grow per shard, and a group's messages
// may be on two shards (the message id's): a growth of the shard count
// moves the group's slot, its older messages stay on the old shard and the
// new one leases none of the newer until the old has none live
// (docs/resharding.md). On one shard the order is
// the epochs'; across shards it is the shard clocks', which differ by up to
// clockSlackMs.
func groupOrder(ix *index, ls map[string]map[uint64]*lease, opt Options) *Result {
	r := newResult("order")
	acks := ix.ackedEpochs()
	groups := map[string][]orderItem{}
	for _, e := range ix.enqOrder {
		if !opt.FIFOQueues[e.queue] || e.group == "" || e.status != history.OK {
			continue
		}
		k := e.queue + "/" + e.group
		groups[k] = append(groups[k], newOrderItem(ix, ls, acks, e, e.ids))
	}
	judgeGroups(r, ix, groups)
	return r
}

// orderItem is what the order checks need of one value of a group.
type orderItem struct {
	e *enqueue
	// lo and hi are the value's first and last leases on each shard.
	lo, hi  map[uint32]*lease
	settled bool
	// firstAckInvoke and firstAckDone bound the first successful ack.
	firstAckInvoke, firstAckDone int64
	acked                        bool
}

// newOrderItem gathers the leases, acks and final state of the message
// ids ids, which carry e's value (an enqueue's ids, or a publish's copies
// on one subscription).
func newOrderItem(ix *index, ls map[string]map[uint64]*lease, acks map[string][]leaseOp, e *enqueue, ids map[string]bool) orderItem {
	it := orderItem{e: e, lo: map[uint32]*lease{}, hi: map[uint32]*lease{}}
	for id := range ids {
		s := shardOf(id)
		for _, l := range ls[id] {
			if lo := it.lo[s]; lo == nil || l.epoch < lo.epoch {
				it.lo[s] = l
			}
			if hi := it.hi[s]; hi == nil || l.epoch > hi.epoch {
				it.hi[s] = l
			}
		}
		for _, a := range acks[id] {
			if !it.acked || a.complet < it.firstAckDone {
				it.firstAckInvoke, it.firstAckDone, it.acked = a.invoke, a.complet, true
			}
		}
		if rec := ix.finals[id]; rec != nil && (rec.State == history.StateAcked || rec.State == history.StateDead) {
			it.settled = true
		}
		if ix.dead[id] {
			it.settled = true
		}
	}
	return it
}

// judgeGroups checks each group's items, in the order of their first
// send, pair by pair (see groupOrder), counting groups and checked items.
func judgeGroups(r *Result, ix *index, groups map[string][]orderItem) {
	slack := ix.clockSlackMs()
	names := make([]string, 0, len(groups))
	for k := range groups {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		its := groups[k]
		r.Count["groups"]++
		for j, b := range its {
			if len(b.lo) == 0 {
				continue
			}
			r.Count["checked"]++
			for _, a := range its[:j] {
				// Only pairs whose order the history fixes: a's enqueue was
				// acknowledged before b's was first sent.
				if a.e.lastOK >= b.e.firstInvoke {
					continue
				}
				// An ack of b that finished before any ack of a was sent was
				// applied first, which one-in-flight order forbids.
				if a.acked && b.acked && b.firstAckDone < a.firstAckInvoke {
					r.violate("ack-reordered", "%s: %q acked (done %s) before earlier %q's ack was sent (%s)", k, b.e.value, ms(b.firstAckDone), a.e.value, ms(a.firstAckInvoke))
				}
				if len(a.hi) == 0 {
					if !a.settled && ix.finalDone() {
						first := b.lo[sortedShards(b.lo)[0]]
						r.violate("skipped", "%s: %q leased (epoch %d) though earlier %q was never leased", k, b.e.value, first.epoch, a.e.value)
					}
					continue
				}
				for _, sa := range sortedShards(a.hi) {
					for _, sb := range sortedShards(b.lo) {
						groupPair(r, k, a.e.value, b.e.value, sa, sb, a.hi[sa], b.lo[sb], slack)
					}
				}
			}
		}
	}
}

// groupPair judges a's last lease on shard sa against b's first on sb,
// a being the earlier message of group k.
func groupPair(r *Result, k, av, bv string, sa, sb uint32, ahi, blo *lease, slackMs int64) {
	if sa == sb {
		if ahi.epoch > blo.epoch {
			r.violate("reordered", "%s: %q leased at epoch %d before earlier %q's epoch %d", k, bv, blo.epoch, av, ahi.epoch)
			return
		}
		if until := ahi.validUntil(); blo.startMs >= 0 && until > 0 && blo.startMs < until {
			r.violate("two-in-flight", "%s: %q leased at %d while earlier %q's lease (epoch %d) was valid until %d", k, bv, blo.startMs, av, ahi.epoch, until)
		}
		return
	}
	if ahi.startMs >= 0 && blo.startMs >= 0 && blo.startMs+slackMs < ahi.startMs {
		r.violate("reordered", "%s: %q leased on shard %d at %d, more than %d ms before earlier %q's lease on shard %d at %d", k, bv, sb, blo.startMs, slackMs, av, sa, ahi.startMs)
		return
	}
	if until := ahi.validUntil(); blo.startMs >= 0 && until > 0 && blo.startMs+slackMs < until {
		r.violate("two-in-flight", "%s: %q leased on shard %d at %d while earlier %q's lease on shard %d (epoch %d) was valid until %d, more than %d ms later", k, bv, sb, blo.startMs, av, sa, ahi.epoch, until, slackMs)
	}
}

// shardOf is the shard a message id names; ids that do not parse (hand
// made histories) count as one shard.
func shardOf(id string) uint32 {
	m, err := wire.ParseMessageID(id)
	if err != nil {
		return 0
	}
	return m.Shard
}

func sortedShards(m map[uint32]*lease) []uint32 {
	out := make([]uint32, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sortedEpochs(m map[uint64]*lease) []*lease {
	out := make([]*lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].epoch < out[j].epoch })
	return out
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ms(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }
