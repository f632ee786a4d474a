package checker

import (
	"sort"
	"strings"

	"github.com/raftq/raftq/jepsen-lite/history"
)

// fanoutCheck judges the fan-out workload (docs/topics.md): a publish to
// a topic reaches every matching subscription that existed when it was
// sent, once, and each subscription is a queue of its own. A history
// without topics passes.
//
// A publish is required on subscription S when an attempt of it was
// acknowledged (ok), its first attempt was sent after S's creation was
// confirmed (so whichever attempt was applied came after), and it
// matches S's filter (evaluated here, not by the server). For each
// subscription:
//
//   - lost: a required publish with no copy on S, delivered or in S's
//     DLQ, after the final drain (unconfirmed without a completed final
//     phase: checker final fails the run then);
//   - unfinished: a required copy delivered but neither acked nor
//     dead-lettered after the drain;
//   - unexpected: a copy whose value no client published (to S's topic);
//     delivered-failed: every attempt of its publish failed;
//   - filter-violation: a copy of a publish that S's filter excludes;
//   - before-creation: a copy of a publish whose every attempt completed,
//     none with an unknown outcome, before S's creation was first asked
//     for (the workload's subscriptions replay nothing);
//   - dup-copies: one publish yielded two message ids on S (the retries
//     of a publish share its dedup key); dup-ids: one dedup key yielded
//     two publication ids;
//   - copies: a publish's answer counted fewer copies than the matching
//     subscriptions confirmed before it was sent, or more than those
//     asked for before it completed; a deduplicated one, any;
//   - phantom-ack: a copy the server says is ACKED though no ack of it
//     succeeded or may have;
//   - dead-early: a copy dead-lettered with fewer receives than S's max
//     receives and no DeadLetter call for it; dead-body: a DLQ entry
//     whose body is not its publish's value; dead-missing: a copy whose
//     DeadLetter call succeeded, yet neither in the DLQ nor DEAD;
//   - dlq-isolation: a publish dead-lettered on one subscription whose
//     copy on another is dead-lettered without cause or left unsettled
//     there (it must be delivered and acked there as if nothing
//     happened); no-dead-letter: the poison subscription was given poison
//     publishes and dead-lettered none, so isolation was never tested;
//   - reordered, two-in-flight, skipped, ack-reordered on FIFO topics:
//     the order checker's rules (groupOrder) over each subscription's
//     copies of the required publishes of each group;
//   - subscribe-failed: a topic or subscription whose creation was asked
//     for and never confirmed: what it should have received is unknown.
func fanoutCheck(ix *index, ls map[string]map[uint64]*lease) *Result {
	r := newResult("fanout")
	if len(ix.subs) == 0 && len(ix.pubs) == 0 {
		return r
	}
	var subs []*subscription
	subOK := map[string]*subscription{}
	filters := map[string]compiledFilter{}
	names := make([]string, 0, len(ix.subs))
	for name := range ix.subs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := ix.subs[name]
		if !s.ok {
			r.violate("subscribe-failed", "creating %s (topic %s) was asked for and never confirmed", s.name, s.spec.Topic)
			continue
		}
		if s.isTopic() {
			continue
		}
		f, err := compileFilter(s.spec.Filter)
		if err != nil {
			r.violate("subscribe-failed", "%s: %v", s.name, err)
			continue
		}
		filters[s.name] = f
		subs = append(subs, s)
		subOK[s.name] = s
	}
	r.Count["subscriptions"] = len(subs)

	// Copies per subscription and value: delivered ids and DLQ entries.
	type key struct{ sub, value string }
	copies := map[key]map[string]bool{}
	addCopy := func(k key, id string) {
		if copies[k] == nil {
			copies[k] = map[string]bool{}
		}
		copies[k][id] = true
	}
	flagged := map[key]bool{}
	judgeCopy := func(s *subscription, value, id string) {
		k := key{s.name, value}
		addCopy(k, id)
		if flagged[k] {
			return
		}
		flagged[k] = true
		p := ix.pubs[value]
		switch {
		case p == nil || p.queue != s.spec.Topic:
			r.violate("unexpected", "%s: copy %s of value %q, which no client published to %s", s.name, id, value, s.spec.Topic)
			return
		case p.status == history.Fail:
			r.violate("delivered-failed", "%s: copy %s of %q, whose every publish attempt failed", s.name, id, value)
		}
		if !filters[s.name].match(msgFields{typ: p.typ, group: p.group, attrs: p.attrs}) {
			r.violate("filter-violation", "%s: copy %s of %q (type %q, attributes %v), which its filter %q excludes", s.name, id, value, p.typ, p.attrs, s.spec.Filter)
		}
		if !p.unsure && p.lastDone < s.firstInvoke {
			r.violate("before-creation", "%s: copy %s of %q, published (done %s) before the subscription was asked for (%s)", s.name, id, value, ms(p.lastDone), ms(s.firstInvoke))
		}
	}
	for _, d := range ix.deliveries {
		if s := subOK[d.queue]; s != nil {
			judgeCopy(s, d.Value, d.MessageID)
		} else if s := ix.subs[d.queue]; s != nil && s.isTopic() {
			r.violate("unexpected", "a receive from topic %s delivered %s", s.name, d.MessageID)
		}
	}
	delivered := map[string]string{} // copy id -> the value a delivery of it carried
	for _, d := range ix.deliveries {
		delivered[d.MessageID] = d.Value
	}
	dead := map[string]*history.Record{} // copy id -> its DLQ record
	for _, e := range ix.deadList {
		s := subOK[e.queue]
		if s == nil {
			continue
		}
		// The body a DLQ entry shows must still be its publish's: the
		// copies share one body, which the other subscriptions' acks
		// must not free.
		value, seen := delivered[e.id]
		switch {
		case e.value == "":
			r.violate("dead-body", "%s: DLQ entry %s has an empty body (its copy's value: %q)", s.name, e.id, value)
		case seen && e.value != value:
			r.violate("dead-body", "%s: DLQ entry %s has body %q, its copy's value is %q", s.name, e.id, e.value, value)
		}
		if !seen {
			value = e.value
		}
		dead[e.id] = e.rec
		if dead[e.id] == nil {
			dead[e.id] = &history.Record{State: history.StateDead}
		}
		judgeCopy(s, value, e.id)
	}
	for k, ids := range copies {
		if len(ids) > 1 {
			r.violate("dup-copies", "%s: publish %q has %d copies %v", k.sub, k.value, len(ids), keys(ids))
		}
	}

	// The settled state of each copy id.
	acked := map[string]bool{}
	for id, os := range ix.ackedEpochs() {
		acked[id] = len(os) > 0
	}
	asked := map[string]bool{}
	for _, o := range ix.leaseOps {
		if o.f == history.FAck && o.typ != history.Fail {
			asked[o.msg] = true
		}
	}
	deadLetterOK := map[string]bool{}
	for _, o := range ix.leaseOps {
		if o.f == history.FDeadLetter && o.typ == history.OK {
			deadLetterOK[o.msg] = true
		}
	}
	isDead := func(id string) bool {
		return dead[id] != nil || ix.finals[id] != nil && ix.finals[id].State == history.StateDead
	}
	// deadFor: a dead copy has cause: its receives reached the max, or
	// a DeadLetter call for it may have been applied.
	deadFor := func(s *subscription, id string) bool {
		var n uint32
		for _, rec := range []*history.Record{dead[id], ix.finals[id]} {
			if rec != nil {
				n = max(n, rec.ReceiveCount)
			}
		}
		return ix.deadLettered[id] || s.spec.MaxReceives > 0 && n >= s.spec.MaxReceives
	}
	for _, id := range keys(deadLetterOK) {
		if s := subOK[ix.msgQueue[id]]; s != nil && !isDead(id) && ix.finalDone() {
			r.violate("dead-missing", "%s: copy %s was dead-lettered (the call succeeded), yet it is neither in the DLQ nor DEAD", s.name, id)
		}
	}
	// deadOn: values dead-lettered with cause, by subscription.
	deadOn := map[string]map[string]bool{}
	copyKeys := make([]key, 0, len(copies))
	for k := range copies {
		copyKeys = append(copyKeys, k)
	}
	sort.Slice(copyKeys, func(i, j int) bool {
		return copyKeys[i].sub < copyKeys[j].sub || copyKeys[i].sub == copyKeys[j].sub && copyKeys[i].value < copyKeys[j].value
	})
	for _, k := range copyKeys {
		s := subOK[k.sub]
		for id := range copies[k] {
			if isDead(id) && deadFor(s, id) {
				if deadOn[k.value] == nil {
					deadOn[k.value] = map[string]bool{}
				}
				deadOn[k.value][k.sub] = true
			}
		}
	}
	deadElsewhere := func(value, sub string) []string {
		var out []string
		for s := range deadOn[value] {
			if s != sub {
				out = append(out, s)
			}
		}
		sort.Strings(out)
		return out
	}
	// Dead copies without cause, required or not.
	for _, k := range copyKeys {
		s := subOK[k.sub]
		for _, id := range keys(copies[k]) {
			if !isDead(id) || deadFor(s, id) {
				continue
			}
			if other := deadElsewhere(k.value, k.sub); len(other) > 0 {
				r.violate("dlq-isolation", "%s: copy %s of %q dead-lettered without cause (receives below %d, no DeadLetter call) while dead-lettered on %v", s.name, id, k.value, s.spec.MaxReceives, other)
			} else {
				r.violate("dead-early", "%s: copy %s of %q dead-lettered with receives below %d and no DeadLetter call", s.name, id, k.value, s.spec.MaxReceives)
			}
		}
	}
	// phantom acks.
	for _, k := range copyKeys {
		for _, id := range keys(copies[k]) {
			if rec := ix.finals[id]; rec != nil && rec.State == history.StateAcked && !asked[id] {
				r.violate("phantom-ack", "%s: copy %s of %q: the server says ACKED, but no ack of it succeeded or may have", k.sub, id, k.value)
			}
		}
	}

	// Publishes: answers, dedup ids, what each subscription must hold.
	byKey := map[string]map[string]bool{}
	for _, p := range ix.pubOrder {
		r.Count["publish-"+p.status]++
		if p.key != "" {
			k := p.queue + "\x00" + p.key
			if byKey[k] == nil {
				byKey[k] = map[string]bool{}
			}
			for id := range p.ids {
				byKey[k][id] = true
			}
		}
		m := msgFields{typ: p.typ, group: p.group, attrs: p.attrs}
		for _, a := range p.answers {
			checkCopies(r, p, a, subs, filters, m)
		}
		poison := p.attrs[history.PoisonAttr] == history.PoisonValue
		// A publish none of whose answers arrived still took effect once a
		// copy of it turned up anywhere; a publish is atomic, so it is
		// then due on every subscription as an acknowledged one is.
		applied := p.status == history.OK
		for _, s := range subs {
			if !applied && s.spec.Topic == p.queue && len(copies[key{s.name, p.value}]) > 0 {
				applied = true
			}
		}
		for _, s := range subs {
			if s.spec.Topic != p.queue || !applied || p.firstInvoke < s.created {
				continue
			}
			if !filters[s.name].match(m) {
				r.Count["filtered-out"]++
				continue
			}
			r.Count["required"]++
			ids := copies[key{s.name, p.value}]
			anyAcked, anyDead := false, false
			for id := range ids {
				rec := ix.finals[id]
				if acked[id] || rec != nil && rec.State == history.StateAcked && asked[id] {
					anyAcked = true
				}
				anyDead = anyDead || isDead(id)
			}
			switch {
			case anyAcked:
				r.Count["acked"]++
				if s.spec.Poison && poison {
					r.Count["poison-acked"]++ // the drain acked it before it could be dead-lettered
				}
			case anyDead:
				r.Count["dead-lettered"]++
				if s.spec.Poison && poison {
					r.Count["poison-dead"]++
				}
			case !ix.finalDone():
				r.Count["unconfirmed"]++
			case len(ids) == 0:
				r.violate("lost", "%s: %q (group %q) published (ok at %s, first sent %s) after the subscription was created (%s): no copy delivered, none in its DLQ",
					s.name, p.value, p.group, ms(p.lastOK), ms(p.firstInvoke), ms(s.created))
			default:
				if other := deadElsewhere(p.value, s.name); len(other) > 0 {
					r.violate("dlq-isolation", "%s: copy %v of %q neither acked nor dead-lettered after the drain, while dead-lettered on %v", s.name, keys(ids), p.value, other)
				} else {
					r.violate("unfinished", "%s: copy %v of %q delivered but neither acked nor dead-lettered after the drain", s.name, keys(ids), p.value)
				}
			}
		}
		if len(deadOn[p.value]) > 0 {
			isolated := true
			for _, s := range subs {
				if deadOn[p.value][s.name] || s.spec.Topic != p.queue || p.status != history.OK || p.firstInvoke < s.created || !filters[s.name].match(m) {
					continue
				}
				got := false
				for id := range copies[key{s.name, p.value}] {
					got = got || acked[id] || ix.finals[id] != nil && ix.finals[id].State == history.StateAcked
				}
				isolated = isolated && got
			}
			if isolated {
				r.Count["isolated"]++ // dead on one, acked on every other it was due on
			}
		}
	}
	for k, ids := range byKey {
		if len(ids) > 1 {
			topic, dk, _ := strings.Cut(k, "\x00")
			r.violate("dup-ids", "topic %s: dedup key %q yielded publication ids %v", topic, dk, keys(ids))
		}
	}
	if ix.finalDone() {
		for _, s := range subs {
			if s.spec.Poison && r.Count["poison-dead"] == 0 && poisonDue(ix, s, filters[s.name]) {
				r.violate("no-dead-letter", "%s: poison publishes were due on it and none was dead-lettered: DLQ isolation went untested", s.name)
			}
		}
	}

	// Per group order, per subscription of a FIFO topic.
	acks := ix.ackedEpochs()
	groups := map[string][]orderItem{}
	for _, s := range subs {
		if !s.spec.FIFO {
			continue
		}
		for _, p := range ix.pubOrder {
			if s.spec.Topic != p.queue || p.status != history.OK || p.group == "" || p.firstInvoke < s.created ||
				!filters[s.name].match(msgFields{typ: p.typ, group: p.group, attrs: p.attrs}) {
				continue
			}
			k := s.name + "/" + p.group
			groups[k] = append(groups[k], newOrderItem(ix, ls, acks, p.enqueue, copies[key{s.name, p.value}]))
		}
	}
	order := newResult("order")
	judgeGroups(order, ix, groups)
	for kind, n := range order.Count {
		if kind == "groups" || kind == "checked" {
			r.Count["order-"+kind] += n
			continue
		}
		r.Valid = false
		r.Count[kind] += n
	}
	for _, v := range order.Violations {
		if len(r.Violations) < maxExamples {
			r.Violations = append(r.Violations, v)
		}
	}
	return r
}

// checkCopies judges one ok answer of publish p against the
// subscriptions that must, and that may, have existed when it was
// applied.
func checkCopies(r *Result, p *publish, a pubAnswer, subs []*subscription, filters map[string]compiledFilter, m msgFields) {
	if a.dedup {
		if a.copies != 0 {
			r.violate("copies", "%q: a deduplicated publish answered %d copies", p.value, a.copies)
		}
		return
	}
	lo, hi := uint32(0), uint32(0)
	for _, s := range subs {
		if s.spec.Topic != p.queue || !filters[s.name].match(m) {
			continue
		}
		if s.created <= a.invoke {
			lo++
		}
		if s.firstInvoke <= a.done {
			hi++
		}
	}
	if a.copies < lo || a.copies > hi {
		r.violate("copies", "%q: the publish answered %d copies; %d matching subscriptions were confirmed before it was sent, %d asked for before it completed", p.value, a.copies, lo, hi)
	}
}

// poisonDue: some ok poison publish was required on s.
func poisonDue(ix *index, s *subscription, f compiledFilter) bool {
	for _, p := range ix.pubOrder {
		if p.attrs[history.PoisonAttr] == history.PoisonValue && p.status == history.OK && p.queue == s.spec.Topic &&
			p.firstInvoke >= s.created && f.match(msgFields{typ: p.typ, group: p.group, attrs: p.attrs}) {
			return true
		}
	}
	return false
}
