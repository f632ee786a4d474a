package fsm

import (
	"fmt"
	"slices"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Fan-out (docs/topics.md). A topic is a queue whose policy has topic set;
// a subscription is a queue whose policy names its topic. An enqueue to a
// topic is a publish: within the one command, every subscription of the
// shard whose filter matches gets a copy, or none does (a full
// subscription refuses the publish). The copies share the publication's
// body: in memory one slice, in a snapshot one record carries it and the
// rest name it (msg.publishedAs). A topic with a retention also keeps the
// publication itself, under the publication's id, for subscriptions
// created later to replay; nothing ever leases it.

// MaxTopicRetentionMs caps topic_retention_ms: 14 days.
const MaxTopicRetentionMs = 14 * 24 * 60 * 60 * 1000

// validateFanout checks the fan-out fields of a policy on their own; the
// meta group checks them against other queues (the topic exists, is one,
// has the same mode and tenant).
func validateFanout(p *fsmpb.QueuePolicy) error {
	sub := p.GetSubscriptionOf() != ""
	switch {
	case p.GetTopic() && sub:
		return fmt.Errorf("%w: a queue is a topic or a subscription, not both", ErrInvalidArgument)
	case !p.GetTopic() && p.GetTopicRetentionMs() != 0:
		return fmt.Errorf("%w: topic_retention_ms is set on a queue that is not a topic", ErrInvalidArgument)
	case !sub && (p.GetFilter() != "" || p.GetReplayFromMs() != 0):
		return fmt.Errorf("%w: filter and replay_from_ms are set on a queue that is not a subscription", ErrInvalidArgument)
	}
	if err := checkRange("topic_retention_ms", p.GetTopicRetentionMs(), 0, MaxTopicRetentionMs); err != nil {
		return err
	}
	if p.GetReplayFromMs() < 0 {
		return fmt.Errorf("%w: replay_from_ms is %d, want 0 (none), 1 (all retained) or a Unix ms", ErrInvalidArgument, p.GetReplayFromMs())
	}
	if sub {
		if err := ValidateQueueName(p.GetSubscriptionOf()); err != nil {
			return fmt.Errorf("subscription_of: %w", err)
		}
		if err := ValidateFilter(p.GetFilter()); err != nil {
			return err
		}
	}
	return nil
}

// usesFanout reports whether an upsert needs format 8: a replica of
// format 7 would treat a topic as a plain queue and keep publishes to
// itself, so its state would part from its leader's.
func usesFanout(p *fsmpb.QueuePolicy) bool {
	return p.GetTopic() || p.GetTopicRetentionMs() != 0 || p.GetSubscriptionOf() != "" ||
		p.GetFilter() != "" || p.GetReplayFromMs() != 0
}

// isTopic reports whether q is a topic.
func (q *queue) isTopic() bool { return q.policy.GetTopic() }

// slotQueue is the queue name a queue's messages are routed by: a
// subscription's copies land on the shard their topic's publish was routed
// to, so its groups move with the topic's slots.
func (q *queue) slotQueue() string {
	if t := q.policy.GetSubscriptionOf(); t != "" {
		return t
	}
	return q.name
}

// indexSubscriptions rebuilds the topic -> subscriptions index after the
// set of queues or their policies changed. Subscriptions are kept by name,
// the order copies are made in on every replica.
func (s *state) indexSubscriptions() {
	subs := map[string][]*queue{}
	for _, q := range s.queues {
		if t := q.policy.GetSubscriptionOf(); t != "" {
			subs[t] = append(subs[t], q)
		}
	}
	for _, l := range subs {
		slices.SortFunc(l, func(a, b *queue) int {
			if a.name < b.name {
				return -1
			}
			return 1
		})
	}
	s.subs = subs
}

// setFilter compiles q's filter. Policies are validated before they are
// applied, so an error here means a snapshot or log this binary cannot
// trust; the subscription then matches nothing rather than everything.
func (q *queue) setFilter() {
	f, err := parseFilter(q.policy.GetFilter())
	if err != nil {
		f = &filter{terms: []filterTerm{{kind: fieldType, op: opExists}, {kind: fieldType, op: opMissing}}}
	}
	q.filter = f
}

// publish is enqueueOne for a topic: dedup, seal and validation as for a
// send, then one copy per matching subscription, all or none.
func (s *state) publish(t *queue, nm *fsmpb.NewMessage, avail int64, full *bool) *fsmpb.EnqueueItemResult {
	if nm.GetUniqueUntilDone() {
		return &fsmpb.EnqueueItemResult{Status: status(fsmpb.Code_CODE_INVALID_ARGUMENT,
			"unique_until_done applies to queues; a publish to topic %q is never done", t.name)}
	}
	var dh dedupHash
	stale := false
	if k := nm.GetDedupKey(); k != "" {
		dh = hashDedup(t.name, k)
		if e, ok := s.dedup.get(dh); ok {
			if e.expireMs > s.clock && e.id >= t.firstID {
				return &fsmpb.EnqueueItemResult{Status: okStatus(), MessageId: e.id, Deduplicated: true}
			}
			stale = true
		}
	}
	if st := s.sealedStatus(t.name, nm); st != nil {
		return &fsmpb.EnqueueItemResult{Status: st}
	}
	attrs := sortedAttrs(nm.GetAttributes())
	var to []*queue
	for _, sub := range s.subs[t.name] {
		if sub.filter.match(nm.GetType(), nm.GetGroupId(), attrs) {
			to = append(to, sub)
		}
	}
	body := nm.GetBody()
	if len(body) == 0 {
		body = nil
	}
	for _, sub := range to {
		if st := s.checkCapacity(sub, len(body), *full); st != nil {
			*full = true
			return &fsmpb.EnqueueItemResult{Status: st}
		}
	}
	if stale {
		s.dropDedup(dh)
	}
	pub := s.nextID
	s.nextID++
	retry := newRetryPolicy(nm.GetMaxReceiveCount(), nm.GetBackoffBaseMs(), nm.GetBackoffMaxMs())
	newCopy := func(id uint64, q *queue, expire int64) *msg {
		m := &msg{
			id: id, seq: s.nextSeq, q: q, body: body, publishedAs: pub, attrs: attrs,
			typ: nm.GetType(), group: nm.GetGroupId(), priority: uint8(nm.GetPriority()),
			enqueuedMs: s.clock, availableMs: avail, expireMs: expire,
			state: fsmpb.State_STATE_READY, stateChangedMs: s.clock, retry: retry,
		}
		s.nextSeq++
		return m
	}
	if r := t.policy.GetTopicRetentionMs(); r > 0 {
		// The retained publication is ready from the start and expires
		// r after it was published: replay copies it as published.
		m := newCopy(pub, t, s.clock+r)
		m.dedupKey = nm.GetDedupKey()
		s.insert(m)
	}
	s.moved(t.name, MoveSent)
	for _, sub := range to {
		m := newCopy(s.nextID, sub, avail+sub.policy.GetRetentionMs())
		s.nextID++
		if avail > s.clock {
			m.state = fsmpb.State_STATE_DELAYED
		}
		s.insert(m)
		s.counters.Enqueued++
		s.moved(sub.name, MoveSent)
	}
	if nm.GetDedupKey() != "" {
		s.addDedup(dh, pub, s.dedupUntil(t, nm))
	}
	return &fsmpb.EnqueueItemResult{Status: okStatus(), MessageId: pub, Deliveries: uint32(len(to))}
}

// replay copies a topic's retained publications of at least fromMs into a
// subscription just created on this shard, in publish order, as a publish
// would have; those its filter refuses, or that no longer fit, are skipped.
// It returns how many it copied.
func (s *state) replay(sub *queue, fromMs int64) uint64 {
	t, ok := s.queues[sub.policy.GetSubscriptionOf()]
	if !ok || !t.isTopic() || t.policy.GetMode() != sub.policy.GetMode() {
		return 0
	}
	var n uint64
	for _, id := range s.memberIDs(t) {
		p, _ := s.get(id)
		if !live(p.state) || p.enqueuedMs < fromMs || !sub.filter.match(p.typ, p.group, p.attrs) {
			continue
		}
		if s.checkCapacity(sub, len(p.body), false) != nil {
			continue
		}
		m := &msg{
			id: s.nextID, seq: s.nextSeq, q: sub, body: p.body, publishedAs: p.publishedAs, attrs: p.attrs,
			typ: p.typ, group: p.group, priority: p.priority,
			enqueuedMs: p.enqueuedMs, availableMs: max(p.availableMs, s.clock),
			state: fsmpb.State_STATE_READY, stateChangedMs: s.clock, retry: p.retry,
		}
		m.expireMs = m.availableMs + sub.policy.GetRetentionMs()
		s.nextID++
		s.nextSeq++
		s.insert(m)
		s.counters.Enqueued++
		s.moved(sub.name, MoveSent)
		n++
	}
	return n
}

// shareBody gives a restored copy of a publication the body an earlier
// record of the snapshot carried, or records the body it carries, so the
// copies share one slice again after a restore. A copy left without a
// body whose publication no earlier record carried one was published
// empty (an acked copy has none of its own either way).
func shareBody(m *msg, bodies map[uint64][]byte) {
	if m.publishedAs == 0 {
		return
	}
	if m.body != nil {
		if _, ok := bodies[m.publishedAs]; !ok {
			bodies[m.publishedAs] = m.body
		}
		return
	}
	if m.state != fsmpb.State_STATE_ACKED {
		m.body = bodies[m.publishedAs]
	}
}
