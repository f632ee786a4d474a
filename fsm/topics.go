package fsm

import (
	"fmt"
	"slices"
	"strings"

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

// UsesFanout reports whether an upsert needs format 8: a replica of
// format 7 would treat a topic as a plain queue and keep publishes to
// itself, so its state would part from its leader's.
func UsesFanout(p *fsmpb.QueuePolicy) bool {
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

// indexSubscription adds a new subscription to the topic ->
// subscriptions index, which keeps them by name: the order copies are made
// in on every replica.
func (s *state) indexSubscription(q *queue) {
	t := q.policy.GetSubscriptionOf()
	if t == "" {
		return
	}
	l := s.subs[t]
	i, _ := slices.BinarySearchFunc(l, q.name, func(e *queue, name string) int { return strings.Compare(e.name, name) })
	s.subs[t] = slices.Insert(l, i, q)
}

// unindexSubscription drops a deleted subscription from the index.
func (s *state) unindexSubscription(q *queue) {
	t := q.policy.GetSubscriptionOf()
	if t == "" {
		return
	}
	l := slices.DeleteFunc(s.subs[t], func(e *queue) bool { return e == q })
	if len(l) == 0 {
		delete(s.subs, t)
		return
	}
	s.subs[t] = l
}

// indexSubscriptions builds the index from every queue (restore).
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
		// The meta group gives a subscription its topic's mode; a copy
		// into a queue of the other mode would break its indexes.
		if sub.policy.GetMode() == t.policy.GetMode() && sub.filter.match(nm.GetType(), nm.GetGroupId(), attrs) {
			to = append(to, sub)
		}
	}
	body := nm.GetBody()
	if len(body) == 0 {
		body = nil
	}
	if st := s.admitCopies(t, to, len(body), *full); st != nil {
		if st.GetCode() == fsmpb.Code_CODE_RESOURCE_EXHAUSTED {
			*full = true
		}
		return &fsmpb.EnqueueItemResult{Status: st}
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
		s.counters.Enqueued++
	}
	s.moved(t.name, MoveSent)
	ownDelay := nm.GetRunAtMs() > 0 || nm.GetDelayMs() != defaultDelayFromQueue
	for _, sub := range to {
		a := avail
		if !ownDelay {
			// A publish without a delay of its own takes each
			// subscription's default delay, as a send takes its queue's.
			a = s.clock + sub.policy.GetDelayMs()
		}
		m := newCopy(s.nextID, sub, a+sub.policy.GetRetentionMs())
		m.availableMs = a
		s.nextID++
		if a > s.clock {
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

// admitCopies checks, before anything is inserted, that every queue a
// publish writes to (the topic when it retains, then each matching
// subscription) takes a body of n bytes: its size limit, its capacity,
// its quotas. A tenant's depth and bytes are checked against all the
// copies together: each check counts the copies admitted before it, and
// the counts are put back before the real inserts.
func (s *state) admitCopies(t *queue, to []*queue, n int, full bool) *fsmpb.Status {
	var counted []*tenantUse
	defer func() {
		for _, u := range counted {
			u.live--
			u.bytes -= uint64(n)
		}
	}()
	admit := func(q *queue) *fsmpb.Status {
		if st := s.checkCapacity(q, n, full); st != nil {
			return st
		}
		if u := q.tenant; u != nil {
			u.live++
			u.bytes += uint64(n)
			counted = append(counted, u)
		}
		return nil
	}
	if full {
		// As for a send: nothing of a batch goes in after a refusal, even
		// a publish no subscription takes.
		return s.checkCapacity(t, n, true)
	}
	for _, sub := range to {
		if lim := sub.policy.GetMaxMessageBytes(); uint64(n) > uint64(lim) {
			return status(fsmpb.Code_CODE_INVALID_ARGUMENT, "body of %d bytes is larger than subscription %q takes (max_message_bytes %d)", n, sub.name, lim)
		}
	}
	if t.policy.GetTopicRetentionMs() > 0 {
		if st := admit(t); st != nil {
			return st
		}
	}
	for _, sub := range to {
		if st := admit(sub); st != nil {
			return st
		}
	}
	return nil
}

// replay copies a topic's retained publications of at least fromMs into a
// subscription just created on this shard, in publish order, as a publish
// would have; those its filter refuses are skipped, and it stops at the
// first that no longer fits (no holes inside a group). A FIFO group whose
// slot is sealed here (moved to another shard, fsm/slots.go) gets none:
// that shard now serves the group, and a copy here would let two shards
// lease it at once. It returns how many it copied.
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
		if sub.fifo() && s.groupSealed(sub.name, p.group) {
			continue
		}
		if s.checkCapacity(sub, len(p.body), false) != nil {
			break
		}
		m := &msg{
			id: s.nextID, seq: s.nextSeq, q: sub, body: p.body, publishedAs: p.publishedAs, attrs: p.attrs,
			typ: p.typ, group: p.group, priority: p.priority,
			enqueuedMs: p.enqueuedMs, availableMs: max(p.availableMs, s.clock),
			state: fsmpb.State_STATE_READY, stateChangedMs: s.clock, retry: p.retry,
		}
		m.expireMs = m.availableMs + sub.policy.GetRetentionMs()
		if m.availableMs > s.clock {
			m.state = fsmpb.State_STATE_DELAYED
		}
		s.nextID++
		s.nextSeq++
		s.insert(m)
		s.counters.Enqueued++
		s.moved(sub.name, MoveSent)
		n++
	}
	return n
}

// sharedBody is the publication whose body a snapshot stream carried
// last, while it is read back.
type sharedBody struct {
	pub  uint64
	body []byte
}

// share gives a restored copy of a publication, written without its body,
// the body the record before it carried, or remembers the body it
// carries, so that copies share one slice again after a restore. A copy
// without a body that does not follow its publication's carrier was
// published empty; an acked copy has none of its own either way.
func (l *sharedBody) share(m *msg) {
	switch {
	case m.publishedAs == 0:
	case m.body != nil:
		l.pub, l.body = m.publishedAs, m.body
	case m.state != fsmpb.State_STATE_ACKED && m.publishedAs == l.pub:
		m.body = l.body
	}
}
