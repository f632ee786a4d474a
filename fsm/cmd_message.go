package fsm

import (
	"sort"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func (s *state) enqueue(c *fsmpb.Enqueue) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	if n := len(c.GetMessages()); n > MaxEnqueueBatch {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "%d messages in one enqueue, limit %d", n, MaxEnqueueBatch)
	}
	items := make([]*fsmpb.EnqueueItemResult, len(c.GetMessages()))
	full := false
	for i, nm := range c.GetMessages() {
		items[i] = s.enqueueOne(q, nm, &full)
	}
	return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Enqueue{Enqueue: &fsmpb.EnqueueResult{Items: items}}}
}

// enqueueOne adds one message. *full is set once the queue refused an item
// for capacity, and every later new message of the same command is refused
// too: otherwise a smaller message could get in behind a refused one of its
// FIFO group. A retry of a message already in the queue (a dedup hit) is
// answered as such even when the queue is full, so a producer that lost an
// answer learns its message is in.
func (s *state) enqueueOne(q *queue, nm *fsmpb.NewMessage, full *bool) *fsmpb.EnqueueItemResult {
	if err := ValidateMessage(nm, q.policy); err != nil {
		return &fsmpb.EnqueueItemResult{Status: invalid(err)}
	}
	avail := s.clock
	switch {
	case nm.GetRunAtMs() > 0:
		if nm.GetRunAtMs()-s.clock > MaxDelayMs {
			return &fsmpb.EnqueueItemResult{Status: status(fsmpb.Code_CODE_INVALID_ARGUMENT,
				"run_at_ms %d is more than %d ms after the shard clock %d", nm.GetRunAtMs(), int64(MaxDelayMs), s.clock)}
		}
		avail = max(nm.GetRunAtMs(), s.clock)
	case nm.GetDelayMs() == defaultDelayFromQueue:
		avail += q.policy.GetDelayMs()
	default:
		avail += nm.GetDelayMs()
	}
	if q.isTopic() {
		return s.publish(q, nm, avail, full)
	}
	var dh dedupHash
	stale := false
	if k := nm.GetDedupKey(); k != "" {
		dh = hashDedup(q.name, k)
		if e, ok := s.dedup.get(dh); ok {
			if e.expireMs > s.clock && e.id >= q.firstID {
				// Also on a sealed slot: the key was written before the
				// seal (none can be after), and the message is here.
				return &fsmpb.EnqueueItemResult{Status: okStatus(), MessageId: e.id, Deduplicated: true}
			}
			stale = true
		}
	}
	if st := s.sealedStatus(q.name, nm); st != nil {
		return &fsmpb.EnqueueItemResult{Status: st}
	}
	if stale {
		s.dropDedup(dh)
	}
	if st := s.checkCapacity(q, len(nm.GetBody()), *full); st != nil {
		*full = true
		return &fsmpb.EnqueueItemResult{Status: st}
	}
	m := &msg{
		id:              s.nextID,
		seq:             s.nextSeq,
		q:               q,
		body:            nm.GetBody(),
		attrs:           sortedAttrs(nm.GetAttributes()),
		typ:             nm.GetType(),
		group:           nm.GetGroupId(),
		dedupKey:        nm.GetDedupKey(),
		priority:        uint8(nm.GetPriority()),
		enqueuedMs:      s.clock,
		availableMs:     avail,
		expireMs:        avail + q.policy.GetRetentionMs(),
		state:           fsmpb.State_STATE_READY,
		uniqueUntilDone: nm.GetUniqueUntilDone() && nm.GetDedupKey() != "",
		retry:           newRetryPolicy(nm.GetMaxReceiveCount(), nm.GetBackoffBaseMs(), nm.GetBackoffMaxMs()),
	}
	if len(m.body) == 0 {
		m.body = nil
	}
	if avail > s.clock {
		m.state = fsmpb.State_STATE_DELAYED
	}
	m.stateChangedMs = s.clock
	s.nextID++
	s.nextSeq++
	s.insert(m)
	s.counters.Enqueued++
	s.moved(q.name, MoveSent)
	if m.dedupKey != "" {
		s.addDedup(dh, m.id, s.dedupUntil(q, nm))
	}
	return &fsmpb.EnqueueItemResult{Status: okStatus(), MessageId: m.id}
}

// checkCapacity refuses a body of n bytes when it would take the queue past
// either per-shard limit, or when an earlier item of the command was refused.
func (s *state) checkCapacity(q *queue, n int, full bool) *fsmpb.Status {
	p := q.policy
	switch lim := p.GetMaxMessagesPerShard(); {
	case full:
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is full on this shard: an earlier message of this batch was refused", q.name)
	case lim > 0 && q.liveCount() >= lim:
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is full on this shard: %d live messages, max_messages_per_shard %d", q.name, q.liveCount(), lim)
	}
	if lim := p.GetMaxBytesPerShard(); lim > 0 && q.liveBytes+uint64(n) > lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is full on this shard: %d live body bytes + %d would pass max_bytes_per_shard %d", q.name, q.liveBytes, n, lim)
	}
	return s.quotaStatus(q, n)
}

func sortedAttrs(a map[string]string) []kv {
	if len(a) == 0 {
		return nil
	}
	out := make([]kv, 0, len(a))
	for k, v := range a {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].k < out[j].k })
	return out
}

// receive leases up to max messages: highest priority then oldest of a
// standard queue; the oldest ready group heads of a FIFO queue.
func (s *state) receive(ctx *applyCtx, c *fsmpb.Receive) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	if q.isTopic() {
		return failed(fsmpb.Code_CODE_FAILED_PRECONDITION, "%q is a topic: receive from one of its subscriptions", q.name)
	}
	n := int(c.GetMax())
	if n == 0 {
		n = 1
	}
	if n > MaxReceiveBatch {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "max is %d, limit %d", n, MaxReceiveBatch)
	}
	vis := c.GetVisibilityTimeoutMs()
	if vis == 0 {
		vis = q.policy.GetVisibilityTimeoutMs()
	}
	if vis < 0 || vis > MaxVisibilityMs {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "visibility_timeout_ms is %d, allowed 1..%d", vis, int64(MaxVisibilityMs))
	}
	if q.paused() {
		return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Receive{Receive: &fsmpb.ReceiveResult{}}}
	}
	consumer := truncate(c.GetConsumer(), MaxConsumerLen)
	if room := q.leaseRoom(); uint64(n) > room {
		if room == 0 && q.ready.Len() > 0 {
			return &fsmpb.Result{Status: q.inFlightStatus()}
		}
		n = int(room)
	}
	var out []*fsmpb.Message
	var bytes uint64
	for len(out) < n {
		it, ok := q.ready.Min()
		if !ok {
			break
		}
		m, _ := s.get(it.id)
		if limit := c.GetMaxBytes(); limit > 0 && len(out) > 0 && bytes+uint64(len(m.body)) > limit {
			break
		}
		bytes += uint64(len(m.body))
		m = s.change(m, fsmpb.State_STATE_LEASED, func(m *msg) {
			s.leaseEpoch++
			m.receiveCount++
			m.leaseEpoch = s.leaseEpoch
			m.leaseDeadline = s.clock + vis
			m.leaseTerm = ctx.term
			if m.firstReceivedMs == 0 {
				m.firstReceivedMs = s.clock
			}
			m.lastReceivedMs = s.clock
			m.addAttempt(attempt{epoch: m.leaseEpoch, receivedMs: s.clock, consumer: consumer})
		})
		s.moved(q.name, MoveReceived)
		out = append(out, m.leasedProto())
	}
	return &fsmpb.Result{Status: okStatus(), Body: &fsmpb.Result_Receive{Receive: &fsmpb.ReceiveResult{Messages: out}}}
}

// cancel deletes ready or delayed messages by id (job cancel). Item
// errors do not name the message: the shard-local id is not the one clients
// know, so the API layer prefixes the public id.
func (s *state) cancel(c *fsmpb.Cancel) *fsmpb.Result {
	q, res := s.queueOf(c.GetQueue())
	if res != nil {
		return res
	}
	if n := len(c.GetMessageIds()); n > maxCancelBatch {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "%d ids in one cancel, limit %d", n, maxCancelBatch)
	}
	items := make([]*fsmpb.ItemResult, len(c.GetMessageIds()))
	for i, id := range c.GetMessageIds() {
		m, ok := s.get(id)
		switch {
		case !ok || m.q != q:
			items[i] = &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_MESSAGE_NOT_FOUND, "not found in queue %q", q.name)}
		case m.state == fsmpb.State_STATE_READY || m.state == fsmpb.State_STATE_DELAYED:
			s.remove(m)
			s.counters.Cancelled++
			items[i] = &fsmpb.ItemResult{Status: okStatus()}
		default:
			items[i] = &fsmpb.ItemResult{Status: status(fsmpb.Code_CODE_FAILED_PRECONDITION, "it is %s; only ready or delayed messages can be cancelled", stateWord(m.state))}
		}
	}
	return itemsResult(items)
}
