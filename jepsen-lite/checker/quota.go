package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// quota: a tenant's quotas on live messages (max_messages) and leases
// (max_in_flight) hold over the whole cluster, as far as the history can
// prove it, and every RESOURCE_EXHAUSTED refusal says when to retry
// (docs/tenancy.md).
//
// The history never says exactly what the cluster held: an operation
// whose outcome is unknown (info) may or may not have applied, and one
// that completed applied at some moment between its invoke and its
// completion. So each check counts only what must have been there, a
// lower bound, and a count above the quota is a proof that the cluster
// held more than it may:
//
//   - over-depth: at time t, more of the tenant's messages were
//     certainly live than max_messages allows. A message is certainly
//     live from the completion of an ok enqueue that returned it (or of
//     an ok receive that delivered it, which proves an enqueue whose
//     answer was lost applied) until the invoke of the first ack of it
//     that did not fail: an ack may apply before it completes, and a
//     failed one certainly did not. Messages the final phase found dead
//     are left out altogether, as the moment they left the live count
//     is unknown (the quota workload's max receives keeps them rare).
//   - over-in-flight: at time t, more of the tenant's messages were
//     certainly leased than max_in_flight allows. A lease is certainly
//     held from the completion of the ok receive that returned it until
//     the first of: the invoke of an ack or nack of the message that did
//     not fail (any epoch: it is not assumed that a stale receipt is
//     refused), and the earliest its lease may have ended in real time.
//     The latter is the earlier of two bounds, so the check stays sound
//     if either holds: the lease deadline (shard clock) less the clock
//     bound B and realTimeMarginMs, on the harness's wall clock (the
//     shard clock runs ahead of a correct clock by at most B: no node
//     beyond B leads), and the receive's invoke plus its visibility
//     timeout less 2B and realTimeMarginMs (a lease keeps its length in
//     real time within 2B: see realTimeEarly).
//   - over-depth-shard, over-in-flight-shard: the same on one shard (the
//     message id names it) against the shard's share.
//   - no-retry-time: a RESOURCE_EXHAUSTED answer, of any queue, without
//     a retry time (google.rpc.RetryInfo): a client has nothing to
//     honour.
//
// Each shard enforces its share of a quota, the limit over the shard
// count rounded up, in its Apply. With the count the run started with, c0,
// that is ceil(limit/c0) on each shard and c0 × that in all: the quota
// itself when c0 divides it (the quota workload's quotas are multiples of
// the usual counts). A growth of the shard count (the reshard nemesis)
// lowers each shard's share, but a shard keeps what it took under the
// larger one, and the new share reaches each shard at its own time. So
// from the invoke of a growth on, the cluster-wide bound is the largest
// share, ceil(limit/c0), times the shard count that may then exist; the
// per-shard bound stays ceil(limit/c0) throughout.
func quotaCheck(ix *index) *Result {
	r := newResult("quota")
	checkRefusals(ix, r)
	if ix.setup == nil {
		return r
	}
	for _, t := range ix.setup.Tenants {
		tenantQuota(ix, r, t, len(ix.setup.Tenants) > 1)
	}
	return r
}

// checkRefusals counts the RESOURCE_EXHAUSTED answers by operation and
// note, and flags those without a retry time.
func checkRefusals(ix *index, r *Result) {
	for _, f := range ix.refusals {
		note := f.note
		if note == "" {
			note = "unnoted"
		}
		r.Count["refused-"+f.f+"-"+note]++
		if f.retryMs <= 0 {
			r.violate("no-retry-time", "%s on queue %q (process %d, node %s) refused at %s without a retry time: %s", f.f, f.queue, f.process, f.node, ms(f.complet), f.msg)
		}
	}
}

// shares is how much one quota lets the cluster hold: at most perShard on
// each shard, on at most start shards plus one per growth invoked.
type shares struct {
	perShard uint64
	start    int
	grows    []int64 // invoke times of the reshard faults, sorted
}

func newShares(limit uint64, start int, grows []int64) shares {
	start = max(start, 1)
	n := uint64(start)
	return shares{perShard: (limit + n - 1) / n, start: start, grows: grows}
}

// shards is how many shards may exist at t: each growth is counted from
// its invoke, including one that turned out capped (a looser bound, never
// a false alarm).
func (s shares) shards(t int64) int {
	return s.start + sort.Search(len(s.grows), func(i int) bool { return s.grows[i] > t })
}

func (s shares) total(t int64) uint64 { return uint64(s.shards(t)) * s.perShard }

// span is one message counted over [from, to) on the harness's clock.
type span struct {
	id       string
	shard    uint32
	from, to int64
}

// tenantQuota checks one tenant's quotas over its queues ("TENANT/...").
func tenantQuota(ix *index, r *Result, t history.TenantSetup, prefixed bool) {
	key := func(k string) string {
		if prefixed {
			return t.Name + ":" + k
		}
		return k
	}
	in := func(queue string) bool { return strings.HasPrefix(queue, t.Name+"/") }
	var grows []int64
	for _, op := range ix.nemesis {
		if op.Kind == "reshard" && op.Type == history.Invoke {
			grows = append(grows, op.Time)
		}
	}
	sort.Slice(grows, func(i, j int) bool { return grows[i] < grows[j] })
	refusedSends, refusedReceives := 0, 0
	for _, f := range ix.refusals {
		if in(f.queue) && f.note == history.NoteQuota {
			switch f.f {
			case history.FEnqueue:
				refusedSends++
			case history.FReceive:
				refusedReceives++
			}
		}
	}
	rounded := func(what string, limit uint64, sh shares) {
		if all := sh.total(math.MinInt64); all != limit {
			r.Notes = append(r.Notes, fmt.Sprintf("tenant %q: %s %d over %d shards is a share of %d each, %d in all: the bound is %d", t.Name, what, limit, sh.start, sh.perShard, all, all))
		}
		if len(sh.grows) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("tenant %q: the shard count grew (%d reshard faults): from the first on, %s is bounded by %d per shard only, and by that times the shards that may exist in all", t.Name, len(sh.grows), what, sh.perShard))
		}
	}
	if t.MaxMessages > 0 {
		sh := newShares(t.MaxMessages, ix.setup.Shards, grows)
		rounded("max_messages", t.MaxMessages, sh)
		r.Count[key("depth-bound")] = int(sh.total(math.MinInt64))
		peak, grown := sweepSpans(depthSpans(ix, in), sh, r, "over-depth", func(n int, s span, bound uint64, where string) string {
			return fmt.Sprintf("tenant %q: at least %d messages certainly live%s at %s, above the bound %d (max_messages %d); the last counted: %s",
				t.Name, n, where, ms(s.from), bound, t.MaxMessages, s.id)
		})
		r.Count[key("max-depth")] = peak
		if len(grows) > 0 {
			r.Count[key("max-depth-grown")] = grown
		}
		if refusedSends == 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("tenant %q: no send was refused for a quota, so max_messages %d was never put to the test (at most %d messages certainly live)", t.Name, t.MaxMessages, max(peak, grown)))
		}
	}
	if t.MaxInFlight > 0 {
		sh := newShares(t.MaxInFlight, ix.setup.Shards, grows)
		rounded("max_in_flight", t.MaxInFlight, sh)
		r.Count[key("in-flight-bound")] = int(sh.total(math.MinInt64))
		peak, grown := sweepSpans(leaseSpans(ix, in), sh, r, "over-in-flight", func(n int, s span, bound uint64, where string) string {
			return fmt.Sprintf("tenant %q: at least %d leases certainly held%s at %s, above the bound %d (max_in_flight %d); the last counted: %s",
				t.Name, n, where, ms(s.from), bound, t.MaxInFlight, s.id)
		})
		r.Count[key("max-in-flight")] = peak
		if len(grows) > 0 {
			r.Count[key("max-in-flight-grown")] = grown
		}
		if refusedReceives == 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("tenant %q: no receive was refused for a quota, so max_in_flight %d may never have been reached (at most %d leases certainly held)", t.Name, t.MaxInFlight, max(peak, grown)))
		}
	}
}

// depthSpans is, per message of the tenant's queues, when it was
// certainly live (see quotaCheck).
func depthSpans(ix *index, in func(string) bool) []span {
	removed := map[string]int64{}
	for _, o := range ix.leaseOps {
		if o.f == history.FAck && o.typ != history.Fail {
			if at, ok := removed[o.msg]; !ok || o.invoke < at {
				removed[o.msg] = o.invoke
			}
		}
	}
	var out []span
	for id, q := range ix.msgQueue {
		if !in(q) || ix.dead[id] || ix.finals[id] != nil && ix.finals[id].State == history.StateDead {
			continue
		}
		from := ix.born[id]
		to := int64(math.MaxInt64)
		if at, ok := removed[id]; ok {
			to = at
		}
		if to > from {
			out = append(out, span{id: id, shard: shardOf(id), from: from, to: to})
		}
	}
	return out
}

// leaseSpans is, per lease of the tenant's queues, when it was certainly
// held (see quotaCheck).
func leaseSpans(ix *index, in func(string) bool) []span {
	settled := map[string]int64{}
	for _, o := range ix.leaseOps {
		if (o.f == history.FAck || o.f == history.FNack) && o.typ != history.Fail {
			if at, ok := settled[o.msg]; !ok || o.invoke < at {
				settled[o.msg] = o.invoke
			}
		}
	}
	boundMs := int64(DefaultClockBoundMs)
	if ix.setup.ClockBoundMs > 0 {
		boundMs = ix.setup.ClockBoundMs
	}
	var out []span
	for _, d := range ix.deliveries {
		if !in(d.queue) || d.visMs <= 0 {
			continue // a lease of unknown length proves nothing
		}
		to := d.invoke + (d.visMs-ix.clockSlackMs())*1e6
		if start := ix.setup.StartUnixMs; start > 0 && d.DeadlineMs > 0 {
			to = min(to, (d.DeadlineMs-boundMs-realTimeMarginMs-start)*1e6)
		}
		if at, ok := settled[d.MessageID]; ok {
			to = min(to, at)
		}
		if to > d.complet {
			out = append(out, span{id: d.MessageID, shard: shardOf(d.MessageID), from: d.complet, to: to})
		}
	}
	return out
}

// sweepSpans counts the distinct messages inside spans at every moment,
// in all and per shard, flags each episode above sh's bounds under kind
// (and kind+"-shard"), and returns the largest count in all before the
// first growth (where the bound in all is exact) and from it on. say words a
// violation: n counted, the span that made it n, the bound, and where
// ("" in all, " on shard S").
func sweepSpans(spans []span, sh shares, r *Result, kind string, say func(n int, s span, bound uint64, where string) string) (peak, grown int) {
	type event struct {
		at    int64
		delta int
		s     *span
	}
	events := make([]event, 0, 2*len(spans))
	for i := range spans {
		s := &spans[i]
		events = append(events, event{s.from, 1, s}, event{s.to, -1, s})
	}
	// At one instant ends come first: a span is [from, to).
	sort.Slice(events, func(i, j int) bool {
		a, b := events[i], events[j]
		if a.at != b.at {
			return a.at < b.at
		}
		if a.delta != b.delta {
			return a.delta < b.delta
		}
		return a.s.id < b.s.id
	})
	refs := map[string]int{} // two leases of one message count once
	perShard := map[uint32]int{}
	overShard := map[uint32]bool{}
	n, over := 0, false
	for _, e := range events {
		id, shard := e.s.id, e.s.shard
		refs[id] += e.delta
		switch {
		case e.delta > 0 && refs[id] == 1:
			n++
			perShard[shard]++
		case e.delta < 0 && refs[id] == 0:
			n--
			perShard[shard]--
			delete(refs, id)
		default:
			continue
		}
		if sh.shards(e.at) == sh.start {
			peak = max(peak, n)
		} else {
			grown = max(grown, n)
		}
		if bound := sh.total(e.at); uint64(n) > bound {
			if !over {
				r.violate(kind, "%s", say(n, *e.s, bound, ""))
			}
			over = true
		} else {
			over = false
		}
		if c := perShard[shard]; uint64(c) > sh.perShard {
			if !overShard[shard] {
				r.violate(kind+"-shard", "%s", say(c, *e.s, sh.perShard, fmt.Sprintf(" on shard %d", shard)))
			}
			overShard[shard] = true
		} else {
			overShard[shard] = false
		}
	}
	return peak, grown
}
