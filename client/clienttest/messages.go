package clienttest

import (
	"context"
	"sort"
	"strings"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const maxBody = 256 << 10

type messagesSvc struct {
	raftqv1.UnimplementedMessagesServer
	s *Server
}

// enqueue adds one message; callers hold s.mu.
func (s *Server) enqueue(queue string, r *raftqv1.SendRequest) (*raftqv1.SendResponse, error) {
	info, err := s.queue(queue)
	if err != nil {
		return nil, err
	}
	if len(r.GetBody()) > maxBody {
		return nil, errorf(codes.InvalidArgument, "body of %d bytes exceeds %d", len(r.GetBody()), maxBody)
	}
	if r.GetPriority() > 9 {
		return nil, errorf(codes.InvalidArgument, "priority %d outside 0-9", r.GetPriority())
	}
	if info.GetPolicy().GetMode() == raftqv1.QueueMode_QUEUE_MODE_FIFO && r.GetGroupId() == "" {
		return nil, errorf(codes.InvalidArgument, "FIFO queue %q needs a message group", queue)
	}
	if k := r.GetDedupKey(); k != "" {
		if id, ok := s.dedup[queue+"\x00"+k]; ok && !s.doneUnique(id) {
			return &raftqv1.SendResponse{MessageId: s.publicID(id), Deduplicated: true}, nil
		}
	}
	if err := s.checkCapacity(queue, info.GetPolicy(), len(r.GetBody())); err != nil {
		return nil, err
	}
	s.nextID++
	now := time.Now().UnixMilli()
	m := &raftqv1.Message{
		Id: s.nextID, Queue: queue, Body: r.GetBody(), Attributes: r.GetAttributes(), Type: r.GetType(),
		GroupId: r.GetGroupId(), DedupKey: r.GetDedupKey(), Priority: r.GetPriority(), Seq: s.nextID,
		EnqueuedMs: now, AvailableMs: now, State: raftqv1.State_STATE_READY,
		MaxReceiveCount: r.GetMaxReceiveCount(), BackoffBaseMs: r.GetBackoffBaseMs(), BackoffMaxMs: r.GetBackoffMaxMs(),
	}
	switch {
	case r.GetRunAtMs() > now:
		m.AvailableMs, m.State = r.GetRunAtMs(), raftqv1.State_STATE_DELAYED
	case r.GetDelayMs() > 0:
		m.AvailableMs, m.State = now+r.GetDelayMs(), raftqv1.State_STATE_DELAYED
	}
	s.msgs[m.Id] = m
	s.order = append(s.order, m.Id)
	s.moved(queue, "sent", 1)
	if k := r.GetDedupKey(); k != "" {
		s.dedup[queue+"\x00"+k] = m.Id
		if r.GetUniqueUntilDone() {
			s.untilDone[m.Id] = true
			m.UniqueUntilDone = true
		}
	}
	s.notify()
	return &raftqv1.SendResponse{MessageId: s.publicID(m.Id)}, nil
}

// doneUnique reports whether message id held its dedup key only until
// done and is done: acked, dead, or gone (a node releases such a key then;
// fsm/unique.go). This server keeps other keys for good, and ignores
// unique_for. Callers hold s.mu.
func (s *Server) doneUnique(id uint64) bool {
	if !s.untilDone[id] {
		return false
	}
	m, ok := s.msgs[id]
	if !ok {
		return true
	}
	switch m.GetState() {
	case raftqv1.State_STATE_READY, raftqv1.State_STATE_DELAYED, raftqv1.State_STATE_LEASED:
		return false
	}
	return true
}

// checkCapacity refuses a send past the queue's capacity limits as a node
// does (this server is one shard, so the per-shard limits are the queue's).
func (s *Server) checkCapacity(queue string, p *raftqv1.QueuePolicy, n int) error {
	maxN, maxB := p.GetMaxMessagesPerShard(), p.GetMaxBytesPerShard()
	if maxN == 0 && maxB == 0 {
		return nil
	}
	var live, bytes uint64
	for _, m := range s.msgs {
		switch m.GetState() {
		case raftqv1.State_STATE_READY, raftqv1.State_STATE_DELAYED, raftqv1.State_STATE_LEASED:
			if m.GetQueue() == queue {
				live++
				bytes += uint64(len(m.GetBody()))
			}
		}
	}
	if maxN > 0 && live >= maxN {
		return errorf(codes.ResourceExhausted, "queue %q is full on this shard: %d live messages, max_messages_per_shard %d", queue, live, maxN)
	}
	if maxB > 0 && bytes+uint64(n) > maxB {
		return errorf(codes.ResourceExhausted, "queue %q is full on this shard: %d live body bytes + %d would pass max_bytes_per_shard %d", queue, bytes, n, maxB)
	}
	return nil
}

func (ms *messagesSvc) Send(_ context.Context, r *raftqv1.SendRequest) (*raftqv1.SendResponse, error) {
	ms.s.mu.Lock()
	defer ms.s.mu.Unlock()
	return ms.s.enqueue(r.GetQueue(), r)
}

func (ms *messagesSvc) SendBatch(ctx context.Context, r *raftqv1.SendBatchRequest) (*raftqv1.SendBatchResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.queue(r.GetQueue()); err != nil {
		return nil, err
	}
	resp := &raftqv1.SendBatchResponse{}
	hinted := false
	for _, m := range r.GetMessages() {
		if len(s.itemFaults) > 0 {
			// As a real node answers items of a batch its shard could not
			// commit: nothing enqueued, the item marked.
			code := s.itemFaults[0]
			s.itemFaults = s.itemFaults[1:]
			if s.itemHint != "" && !hinted {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-leader-hint", s.itemHint))
				hinted = true
			}
			res := &raftqv1.SendResult{Code: int32(code), Error: "injected item " + code.String()}
			if code == codes.ResourceExhausted {
				res.RetryAfterMs = s.itemRetry.Milliseconds()
			}
			resp.Results = append(resp.Results, res)
			continue
		}
		one, err := s.enqueue(r.GetQueue(), m)
		if err != nil {
			st := status.Convert(err)
			resp.Results = append(resp.Results, &raftqv1.SendResult{Code: int32(st.Code()), Error: st.Message()})
			continue
		}
		resp.Results = append(resp.Results, &raftqv1.SendResult{MessageId: one.GetMessageId(), Deduplicated: one.GetDeduplicated()})
	}
	return resp, nil
}

// take leases up to n ready messages, highest priority then oldest first;
// callers hold s.mu.
func (s *Server) take(queue string, n int, visibility time.Duration, consumer string) []*raftqv1.ReceivedMessage {
	if s.queues[queue].GetPaused() {
		return nil
	}
	now := time.Now()
	var ready []*raftqv1.Message
	for _, id := range s.order {
		if m, ok := s.msgs[id]; ok && m.Queue == queue && s.stateOf(m, now) == raftqv1.State_STATE_READY {
			ready = append(ready, m)
		}
	}
	sort.SliceStable(ready, func(i, j int) bool { return ready[i].Priority > ready[j].Priority })
	var out []*raftqv1.ReceivedMessage
	for _, m := range ready[:min(n, len(ready))] {
		s.nextEpoch++
		m.State, m.LeaseEpoch = raftqv1.State_STATE_LEASED, s.nextEpoch
		m.LeaseDeadlineMs = now.Add(visibility).UnixMilli()
		m.ReceiveCount++
		m.LastReceivedMs = now.UnixMilli()
		m.History = append(m.History, &raftqv1.Attempt{LeaseEpoch: m.LeaseEpoch, ReceivedMs: now.UnixMilli(), Consumer: consumer})
		s.moved(queue, "received", 1)
		out = append(out, &raftqv1.ReceivedMessage{
			MessageId: s.publicID(m.Id), Receipt: wire.Receipt{Shard: s.Shard, ID: m.Id, Epoch: m.LeaseEpoch, Term: 1}.String(),
			LeaseEpoch: m.LeaseEpoch, Body: m.Body, Attributes: m.Attributes, Type: m.Type, GroupId: m.GroupId,
			Priority: m.Priority, ReceiveCount: m.ReceiveCount, EnqueuedMs: m.EnqueuedMs,
			LeaseDeadlineMs: m.LeaseDeadlineMs, LastError: m.LastError,
		})
	}
	return out
}

func (ms *messagesSvc) Receive(ctx context.Context, r *raftqv1.ReceiveRequest) (*raftqv1.ReceiveResponse, error) {
	s := ms.s
	n := int(max(r.GetMaxMessages(), 1))
	if n > 1000 || r.GetWaitMs() > 20000 || r.GetWaitMs() < 0 {
		return nil, errorf(codes.InvalidArgument, "max %d or wait %dms out of range", n, r.GetWaitMs())
	}
	deadline := time.Now().Add(time.Duration(r.GetWaitMs()) * time.Millisecond)
	for {
		s.mu.Lock()
		info, err := s.queue(r.GetQueue())
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		vis := time.Duration(r.GetVisibilityTimeoutMs()) * time.Millisecond
		if vis == 0 {
			vis = time.Duration(info.GetPolicy().GetVisibilityTimeoutMs()) * time.Millisecond
		}
		if vis == 0 {
			vis = 30 * time.Second
		}
		got := s.take(r.GetQueue(), n, vis, r.GetConsumer())
		wake := s.wake
		s.mu.Unlock()
		left := time.Until(deadline)
		if len(got) > 0 || left <= 0 {
			return &raftqv1.ReceiveResponse{Messages: got}, nil
		}
		// Delays and lease expiry are lazy here, so poll them at 20 ms too.
		t := time.NewTimer(min(left, 20*time.Millisecond))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		t.Stop()
	}
}

func (ms *messagesSvc) Ack(ctx context.Context, r *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := checkResults(r); err != nil {
		return nil, err
	}
	resp := &raftqv1.AckResponse{}
	for _, rc := range r.GetReceipts() {
		if p, err := wire.ParseReceipt(rc); err == nil {
			if err := s.notLeader(ctx, p.Shard); err != nil {
				return nil, err
			}
		}
	}
	for i, rc := range r.GetReceipts() {
		if s.ackedWith(rc) {
			// A repeat of an ack that went through, as raftq answers it.
			resp.Results = append(resp.Results, &raftqv1.ItemStatus{AlreadyAcked: true})
			continue
		}
		m, err := s.lease(ctx, rc)
		if err != nil {
			st := status.Convert(err)
			resp.Results = append(resp.Results, &raftqv1.ItemStatus{Code: int32(st.Code()), Error: st.Message()})
			continue
		}
		m.State = raftqv1.State_STATE_ACKED
		if rs := r.GetResults(); len(rs) > 0 && len(rs[i]) > 0 {
			m.Result = rs[i]
		}
		endAttempt(m, time.Now().UnixMilli(), raftqv1.Reason_REASON_UNSPECIFIED, "")
		s.moved(m.Queue, "acked", 1)
		resp.Results = append(resp.Results, &raftqv1.ItemStatus{})
	}
	return resp, nil
}

func (ms *messagesSvc) Nack(ctx context.Context, r *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lease(ctx, r.GetReceipt())
	if err != nil {
		return nil, err
	}
	delay := time.Duration(r.GetDelayMs()) * time.Millisecond
	if !r.GetHasDelay() {
		delay = s.backoff(m)
	}
	s.release(m, delay, raftqv1.Reason_REASON_NACKED, r.GetError())
	s.moved(m.Queue, "nacked", 1)
	return &raftqv1.NackResponse{}, nil
}

func (ms *messagesSvc) Snooze(ctx context.Context, r *raftqv1.SnoozeRequest) (*raftqv1.SnoozeResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lease(ctx, r.GetReceipt())
	if err != nil {
		return nil, err
	}
	// As raftq does (fsm/cmd_snooze.go): the receive this lease took is
	// given back, so the release below can never dead-letter it.
	if m.ReceiveCount > 0 {
		m.ReceiveCount--
	}
	lastErr := m.LastError
	s.release(m, time.Duration(r.GetDelayMs())*time.Millisecond, raftqv1.Reason_REASON_SNOOZED, r.GetReason())
	m.LastError = lastErr
	s.moved(m.Queue, "snoozed", 1)
	return &raftqv1.SnoozeResponse{}, nil
}

func (ms *messagesSvc) ExtendLease(ctx context.Context, r *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lease(ctx, r.GetReceipt())
	if err != nil {
		return nil, err
	}
	if s.staleIDs[s.publicID(m.Id)] {
		return nil, errorf(codes.FailedPrecondition, "stale receipt for message %s (injected)", s.publicID(m.Id))
	}
	if r.GetVisibilityTimeoutMs() <= 0 {
		return nil, errorf(codes.InvalidArgument, "visibility %dms is not positive", r.GetVisibilityTimeoutMs())
	}
	m.LeaseDeadlineMs = time.Now().UnixMilli() + r.GetVisibilityTimeoutMs()
	s.moved(m.Queue, "extended", 1)
	return &raftqv1.ExtendLeaseResponse{LeaseDeadlineMs: m.LeaseDeadlineMs}, nil
}

func (ms *messagesSvc) DeadLetter(ctx context.Context, r *raftqv1.DeadLetterRequest) (*raftqv1.DeadLetterResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.lease(ctx, r.GetReceipt())
	if err != nil {
		return nil, err
	}
	s.release(m, 0, raftqv1.Reason_REASON_POISON, r.GetError())
	s.moved(m.Queue, "dead_lettered_by_client", 1)
	return &raftqv1.DeadLetterResponse{}, nil
}

// byID resolves a public message id; callers hold s.mu.
func (s *Server) byID(ctx context.Context, id string) (*raftqv1.Message, error) {
	mid, err := wire.ParseMessageID(id)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.notLeader(ctx, mid.Shard); err != nil {
		return nil, err
	}
	m, ok := s.msgs[mid.ID]
	if !ok {
		return nil, errorf(codes.NotFound, "message %s not found", id)
	}
	s.stateOf(m, time.Now())
	return m, nil
}

func (ms *messagesSvc) GetMessage(ctx context.Context, r *raftqv1.GetMessageRequest) (*raftqv1.MessageInfo, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.byID(ctx, r.GetMessageId())
	if err != nil {
		return nil, err
	}
	return &raftqv1.MessageInfo{MessageId: r.GetMessageId(), Message: proto.Clone(m).(*raftqv1.Message)}, nil
}

func (ms *messagesSvc) CancelMessage(ctx context.Context, r *raftqv1.CancelMessageRequest) (*raftqv1.CancelMessageResponse, error) {
	s := ms.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.byID(ctx, r.GetMessageId())
	if err != nil {
		return nil, err
	}
	if m.State != raftqv1.State_STATE_READY && m.State != raftqv1.State_STATE_DELAYED {
		return nil, errorf(codes.FailedPrecondition, "message %s: it is %s; only ready or delayed messages can be cancelled",
			r.GetMessageId(), strings.ToLower(strings.TrimPrefix(m.State.String(), "STATE_")))
	}
	delete(s.msgs, m.Id)
	return &raftqv1.CancelMessageResponse{}, nil
}

type deadSvc struct {
	raftqv1.UnimplementedDeadLettersServer
	s *Server
}

// dead lists dead messages of queue in enqueue order, filtered by ids when
// given; callers hold s.mu.
func (s *Server) dead(queue string, ids []string) ([]*raftqv1.Message, error) {
	if _, err := s.queue(queue); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []*raftqv1.Message
	now := time.Now()
	for _, id := range s.order {
		m, ok := s.msgs[id]
		if ok && m.Queue == queue && s.stateOf(m, now) == raftqv1.State_STATE_DEAD && (len(ids) == 0 || want[s.publicID(id)]) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (d *deadSvc) ListDead(_ context.Context, r *raftqv1.ListDeadRequest) (*raftqv1.ListDeadResponse, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	dead, err := s.dead(r.GetQueue(), nil)
	if err != nil {
		return nil, err
	}
	dead = matching(dead, r.GetFilter())
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 100
	}
	resp := &raftqv1.ListDeadResponse{}
	for _, m := range dead[:min(limit, len(dead))] {
		resp.Messages = append(resp.Messages, &raftqv1.MessageInfo{MessageId: s.publicID(m.Id), Message: proto.Clone(m).(*raftqv1.Message)})
	}
	return resp, nil
}

func (d *deadSvc) Redrive(_ context.Context, r *raftqv1.RedriveRequest) (*raftqv1.RedriveResponse, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	dead, err := s.dead(r.GetQueue(), r.GetMessageIds())
	if err != nil {
		return nil, err
	}
	dead = matching(dead, r.GetFilter())
	if r.GetDryRun() {
		resp := &raftqv1.RedriveResponse{Matched: uint64(len(dead))}
		for _, m := range dead {
			resp.WouldMove = append(resp.WouldMove, &raftqv1.MessageInfo{MessageId: s.publicID(m.Id), Message: proto.Clone(m).(*raftqv1.Message)})
		}
		return resp, nil
	}
	if t := r.GetTargetQueue(); t != "" {
		return s.redriveTo(r.GetQueue(), t, dead)
	}
	for _, m := range dead {
		m.State, m.ReceiveCount, m.DeadReason = raftqv1.State_STATE_READY, 0, raftqv1.Reason_REASON_UNSPECIFIED
	}
	if len(dead) > 0 {
		s.moved(r.GetQueue(), "redriven", uint64(len(dead)))
	}
	s.notify()
	return &raftqv1.RedriveResponse{Redriven: uint64(len(dead))}, nil
}

func (d *deadSvc) Discard(_ context.Context, r *raftqv1.DiscardRequest) (*raftqv1.DiscardResponse, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	dead, err := s.dead(r.GetQueue(), r.GetMessageIds())
	if err != nil {
		return nil, err
	}
	for _, m := range dead {
		delete(s.msgs, m.Id)
	}
	return &raftqv1.DiscardResponse{Discarded: uint64(len(dead))}, nil
}
