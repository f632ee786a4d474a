package server

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
	"github.com/raftq/raftq/wire"
)

// Long-poll and batch bounds of the public API.
const (
	maxWait         = 20 * time.Second
	defaultDeadList = 100
	// receiveBodyBudget bounds the bodies of one receive so the response
	// stays under gRPC's default 4 MiB message limit on clients.
	receiveBodyBudget = 3 << 20
)

type messages struct {
	*Server
	raftqv1.UnimplementedMessagesServer
}

// newMessage validates one send and converts it to the FSM's form. The FSM
// repeats the checks deterministically; checking here answers bad input
// without a raft write.
func (s *Server) newMessage(policy *fsmpb.QueuePolicy, req *raftqv1.SendRequest) (*fsmpb.NewMessage, error) {
	if req.GetDelayMs() < 0 || req.GetRunAtMs() < 0 {
		return nil, invalid("delay_ms and run_at_ms must not be negative")
	}
	delay := req.GetDelayMs()
	if delay == 0 {
		delay = -1 // the queue's default delay
	}
	nm := &fsmpb.NewMessage{
		Body: req.GetBody(), Attributes: req.GetAttributes(), Type: req.GetType(),
		GroupId: req.GetGroupId(), DedupKey: req.GetDedupKey(), Priority: req.GetPriority(),
		DelayMs: delay, RunAtMs: req.GetRunAtMs(),
		UniqueForMs: req.GetUniqueForMs(), UniqueUntilDone: req.GetUniqueUntilDone(),
		MaxReceiveCount: req.GetMaxReceiveCount(), BackoffBaseMs: req.GetBackoffBaseMs(), BackoffMaxMs: req.GetBackoffMaxMs(),
	}
	if policy != nil {
		if err := fsm.ValidateMessage(nm, policy); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return nm, nil
}

// sendPolicy is the normalized policy of queue from the local meta replica
// for validating sends, looked up once per call; nil when this node does not
// know the queue yet (the shard's FSM then decides).
func (s *Server) sendPolicy(queue string) *fsmpb.QueuePolicy {
	mq, ok := s.node.Meta().Queue(queue)
	if !ok {
		return nil
	}
	return fsm.NormalizePolicy(mq.Policy)
}

func (m *messages) Send(ctx context.Context, req *raftqv1.SendRequest) (*raftqv1.SendResponse, error) {
	if err := validateQueue(req.GetQueue(), nil); err != nil {
		return nil, err
	}
	nm, err := m.newMessage(m.sendPolicy(req.GetQueue()), req)
	if err != nil {
		return nil, err
	}
	sent, err := m.router.Send(ctx, req.GetQueue(), []*fsmpb.NewMessage{nm})
	if err != nil {
		return nil, m.toStatus(ctx, err)
	}
	if sent[0].Err != nil {
		err := m.toStatus(ctx, sent[0].Err)
		m.noteRefusal(req.GetQueue(), err)
		return nil, err
	}
	id, item := sent[0].Shard, sent[0].Item
	if err := resultStatus(item.GetStatus()); err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			m.events.Count(req.GetQueue(), "refused_full", 1)
			m.noteRefusal(req.GetQueue(), err)
		}
		return nil, err
	}
	if item.GetDeduplicated() {
		m.events.Count(req.GetQueue(), "deduplicated", 1)
	} else {
		m.events.Count(req.GetQueue(), "sent", 1)
	}
	return &raftqv1.SendResponse{
		MessageId:    wire.MessageID{Shard: id, ID: item.GetMessageId()}.String(),
		Deduplicated: item.GetDeduplicated(),
		Deliveries:   item.GetDeliveries(),
	}, nil
}

func (m *messages) SendBatch(ctx context.Context, req *raftqv1.SendBatchRequest) (*raftqv1.SendBatchResponse, error) {
	if err := validateQueue(req.GetQueue(), nil); err != nil {
		return nil, err
	}
	n := len(req.GetMessages())
	if n == 0 || n > fsm.MaxEnqueueBatch {
		return nil, invalid("a batch holds 1 to %d messages, got %d", fsm.MaxEnqueueBatch, n)
	}
	results := make([]*raftqv1.SendResult, n)
	msgs := make([]*fsmpb.NewMessage, n)
	policy := m.sendPolicy(req.GetQueue())
	for i, sr := range req.GetMessages() {
		nm, err := m.newMessage(policy, sr)
		if err != nil {
			st, _ := status.FromError(err)
			results[i] = &raftqv1.SendResult{Code: int32(st.Code()), Error: st.Message()}
			continue
		}
		msgs[i] = nm
	}
	// The router places each message by the current slot table, one
	// balanced shard for the unkeyed ones, and resends what a moving slot
	// refused; without a shard map it sends nothing and the batch fails
	// as a whole.
	answers, err := m.router.Send(ctx, req.GetQueue(), msgs)
	if err != nil {
		return nil, m.toStatus(ctx, err)
	}
	// The messages of one shard share its error: render each error once
	// (a flood refused by the hundred thousand per second spent a third
	// of a leader's CPU rendering the same refusal per item).
	failed := map[error]*raftqv1.SendResult{}
	for i, a := range answers {
		if msgs[i] == nil {
			continue
		}
		if a.Err != nil {
			// Only an error of a comparable type can be a map key.
			key := reflect.TypeOf(a.Err).Comparable()
			var r *raftqv1.SendResult
			if key {
				r = failed[a.Err]
			}
			if r == nil {
				err := m.toStatus(ctx, a.Err)
				st, _ := status.FromError(err)
				r = &raftqv1.SendResult{Code: int32(st.Code()), Error: st.Message(), RetryAfterMs: retryMs(err)}
			}
			if key {
				failed[a.Err] = r
			}
			results[i] = r
			continue
		}
		code, msg := itemStatus(a.Item.GetStatus())
		results[i] = &raftqv1.SendResult{Code: code, Error: msg, Deduplicated: a.Item.GetDeduplicated(), Deliveries: a.Item.GetDeliveries()}
		if codes.Code(code) == codes.ResourceExhausted {
			results[i].RetryAfterMs = quotaRetry.Milliseconds()
		}
		if code == 0 {
			results[i].MessageId = wire.MessageID{Shard: a.Shard, ID: a.Item.GetMessageId()}.String()
		}
	}
	m.noteBatchRefusal(req.GetQueue(), results)
	sent, deduplicated, full := 0, 0, 0
	for _, r := range results {
		switch {
		case codes.Code(r.GetCode()) == codes.ResourceExhausted:
			full++
		case r.GetCode() != 0:
		case r.GetDeduplicated():
			deduplicated++
		default:
			sent++
		}
	}
	m.events.Count(req.GetQueue(), "sent", sent)
	if deduplicated > 0 {
		m.events.Count(req.GetQueue(), "deduplicated", deduplicated)
	}
	if full > 0 {
		m.events.Count(req.GetQueue(), "refused_full", full)
	}
	return &raftqv1.SendBatchResponse{Results: results}, nil
}

func (m *messages) Receive(ctx context.Context, req *raftqv1.ReceiveRequest) (*raftqv1.ReceiveResponse, error) {
	if err := validateQueue(req.GetQueue(), nil); err != nil {
		return nil, err
	}
	max := req.GetMaxMessages()
	if max == 0 {
		max = 1
	}
	if max > fsm.MaxReceiveBatch {
		return nil, invalid("max_messages %d above the limit %d", max, fsm.MaxReceiveBatch)
	}
	// Bounds are checked on the milliseconds as sent: converted first, a
	// huge wait_ms overflowed time.Duration and passed as a short wait.
	if err := msWithin("wait_ms", req.GetWaitMs(), maxWait.Milliseconds()); err != nil {
		return nil, err
	}
	wait := time.Duration(req.GetWaitMs()) * time.Millisecond
	if err := msWithin("visibility_timeout_ms", req.GetVisibilityTimeoutMs(), fsm.MaxVisibilityMs); err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	rq := &fsmpb.Receive{Queue: req.GetQueue(), Max: max, VisibilityTimeoutMs: req.GetVisibilityTimeoutMs(), Consumer: req.GetConsumer(), MaxBytes: receiveBodyBudget}
	mq, ok := m.node.Meta().Queue(req.GetQueue())
	if ok && mq.Policy.GetTopic() {
		// Said at once rather than after a long poll: the shards refuse
		// it too (fsm/topics.go).
		return nil, status.Errorf(codes.FailedPrecondition, "%q is a topic: receive from one of its subscriptions", req.GetQueue())
	}
	if !ok && wait > 0 {
		// Do not park a long poll on a queue nobody created (this node's
		// meta replica may lag, so ask the shards). The first sweep is the
		// caller's real receive: whatever it leases is returned, never
		// dropped.
		wait = 0
	}
	start := time.Now()
	leased, waited, err := m.router.Receive(ctx, rq, wait)
	if err == nil && len(leased) == 0 && wait == 0 && req.GetWaitMs() > 0 {
		first := time.Since(start)
		leased, waited, err = m.router.Receive(ctx, rq, time.Duration(req.GetWaitMs())*time.Millisecond)
		waited += first
	}
	if err != nil && len(leased) == 0 {
		return nil, m.toStatus(ctx, err)
	}
	out := &raftqv1.ReceiveResponse{Messages: make([]*raftqv1.ReceivedMessage, 0, len(leased)), WaitedUs: waited.Microseconds()}
	for _, l := range leased {
		out.Messages = append(out.Messages, m.received(l))
	}
	m.events.Count(req.GetQueue(), "received", len(out.Messages))
	if len(leased) > 0 {
		m.events.ObserveReceive(waited, time.Since(start)-waited)
	}
	return out, nil
}

func (s *Server) received(l router.Leased) *raftqv1.ReceivedMessage {
	msg := l.Message
	r := wire.Receipt{Shard: l.Shard, ID: msg.GetId(), Epoch: msg.GetLeaseEpoch(), Term: msg.GetLeaseTerm()}
	if keys := s.receipts.Load(); keys != nil {
		r = keys.Sign(r)
	}
	return &raftqv1.ReceivedMessage{
		MessageId:       wire.MessageID{Shard: l.Shard, ID: msg.GetId()}.String(),
		Receipt:         r.String(),
		LeaseEpoch:      msg.GetLeaseEpoch(),
		Body:            msg.GetBody(),
		Attributes:      msg.GetAttributes(),
		Type:            msg.GetType(),
		GroupId:         msg.GetGroupId(),
		Priority:        msg.GetPriority(),
		ReceiveCount:    msg.GetReceiveCount(),
		EnqueuedMs:      msg.GetEnqueuedMs(),
		LeaseDeadlineMs: msg.GetLeaseDeadlineMs(),
		LastError:       msg.GetLastError(),
	}
}

// shardOf parses a receipt and checks that it names a shard of the map.
// Callers check ready first: without a map every receipt would look out of
// range.
func (s *Server) shardOf(receipt string) (wire.Receipt, error) {
	r, err := wire.ParseReceipt(receipt)
	if err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	if keys := s.receipts.Load(); keys != nil {
		if err := keys.Verify(r); err != nil {
			return r, status.Error(codes.PermissionDenied, err.Error())
		}
	}
	if n := s.router.ShardCount(); r.Shard >= n {
		return r, invalid("receipt names shard %d, the cluster has %d", r.Shard, n)
	}
	return r, nil
}

func fsmReceipt(r wire.Receipt) *fsmpb.Receipt {
	return &fsmpb.Receipt{MessageId: r.ID, LeaseEpoch: r.Epoch}
}

func (m *messages) Ack(ctx context.Context, req *raftqv1.AckRequest) (*raftqv1.AckResponse, error) {
	n := len(req.GetReceipts())
	if n == 0 || n > fsm.MaxReceiveBatch {
		return nil, invalid("ack takes 1 to %d receipts, got %d", fsm.MaxReceiveBatch, n)
	}
	if err := checkAckResults(req); err != nil {
		return nil, err
	}
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	out := make([]*raftqv1.ItemStatus, n)
	parsed := make([]wire.Receipt, n)
	for i, s := range req.GetReceipts() {
		r, err := m.shardOf(s)
		if err != nil {
			st, _ := status.FromError(err)
			out[i] = &raftqv1.ItemStatus{Code: int32(st.Code()), Error: st.Message()}
			continue
		}
		parsed[i] = r
	}
	plan := router.PlanItems(n, func(i int) (uint32, bool) { return parsed[i].Shard, out[i] == nil })
	answers := router.Scatter(ctx, plan, func(ctx context.Context, p router.Part) (*fsmpb.Result, error) {
		ack := &fsmpb.Ack{}
		for _, i := range p.Items {
			ack.Receipts = append(ack.Receipts, fsmReceipt(parsed[i]))
		}
		ack.Results = partResults(req, p.Items)
		return m.router.Apply(ctx, p.Shard, &fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: ack}})
	})
	for _, a := range answers {
		err := a.Err
		if err == nil {
			err = resultStatus(a.Value.GetStatus())
		}
		items := a.Value.GetItems().GetItems()
		if err == nil && len(items) != len(a.Items) {
			err = status.Errorf(codes.Internal, "ack returned %d results for %d receipts", len(items), len(a.Items))
		}
		for k, i := range a.Items {
			if err != nil {
				st, _ := status.FromError(m.toStatus(ctx, err))
				out[i] = &raftqv1.ItemStatus{Code: int32(st.Code()), Error: st.Message()}
				continue
			}
			code, msg := itemStatus(items[k].GetStatus())
			out[i] = &raftqv1.ItemStatus{Code: code, Error: leaseError(parsed[i], msg), AlreadyAcked: items[k].GetAlreadyAcked()}
		}
	}
	// Acks, like nacks, snoozes, extends and dead letters, are counted
	// in raftq_messages_total by the shard leader as they commit: it
	// knows the message's queue, which the receipt does not name
	// (metrics/queues.go).
	return &raftqv1.AckResponse{Results: out}, nil
}

// one applies a single-item receipt command and returns its item result.
func (s *Server) one(ctx context.Context, shard uint32, cmd *fsmpb.Command) (*fsmpb.ItemResult, error) {
	res, err := s.router.Apply(ctx, shard, cmd)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := resultStatus(res.GetStatus()); err != nil {
		return nil, err
	}
	items := res.GetItems().GetItems()
	if len(items) != 1 {
		return nil, status.Errorf(codes.Internal, "expected 1 item result, got %d", len(items))
	}
	return items[0], resultStatus(items[0].GetStatus())
}

// settle applies a single-receipt lease command (nack, extend,
// dead-letter). A refusal of the item names the message as clients know it.
func (s *Server) settle(ctx context.Context, r wire.Receipt, cmd *fsmpb.Command) (*fsmpb.ItemResult, error) {
	item, err := s.one(ctx, r.Shard, cmd)
	if err != nil && item != nil {
		st := item.GetStatus()
		return item, status.Error(grpcCode(st.GetCode()), leaseError(r, st.GetMessage()))
	}
	return item, err
}

// msWithin checks a millisecond field against 0..limit, naming the limit
// as a duration too.
func msWithin(field string, v, limit int64) error {
	if v < 0 || v > limit {
		return invalid("%s %d is outside 0..%d (%v)", field, v, limit, time.Duration(limit)*time.Millisecond)
	}
	return nil
}

// leaseError renders the FSM's reason for refusing a receipt with the
// message id in the form clients print (wire.MessageID), which the FSM does
// not know; "" stays "".
func leaseError(r wire.Receipt, reason string) string {
	if reason == "" {
		return ""
	}
	return fmt.Sprintf("message %s: %s", wire.MessageID{Shard: r.Shard, ID: r.ID}, reason)
}

func (m *messages) Nack(ctx context.Context, req *raftqv1.NackRequest) (*raftqv1.NackResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	r, err := m.shardOf(req.GetReceipt())
	if err != nil {
		return nil, err
	}
	if err := msWithin("delay_ms", req.GetDelayMs(), fsm.MaxDelayMs); err != nil {
		return nil, err
	}
	if len(req.GetError()) > fsm.MaxErrorLen {
		return nil, invalid("error text of %d bytes above the limit %d", len(req.GetError()), fsm.MaxErrorLen)
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.Nack{Items: []*fsmpb.NackItem{{
		Receipt: fsmReceipt(r), HasDelay: req.GetHasDelay(), DelayMs: req.GetDelayMs(), Error: req.GetError(),
	}}}}}
	if _, err := m.settle(ctx, r, cmd); err != nil {
		return nil, err
	}
	return &raftqv1.NackResponse{}, nil
}

func (m *messages) ExtendLease(ctx context.Context, req *raftqv1.ExtendLeaseRequest) (*raftqv1.ExtendLeaseResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	r, err := m.shardOf(req.GetReceipt())
	if err != nil {
		return nil, err
	}
	if v := req.GetVisibilityTimeoutMs(); v <= 0 || v > fsm.MaxVisibilityMs {
		return nil, invalid("visibility_timeout_ms must be within 1..%d", int64(fsm.MaxVisibilityMs))
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Extend{Extend: &fsmpb.Extend{Items: []*fsmpb.ExtendItem{{
		Receipt: fsmReceipt(r), VisibilityTimeoutMs: req.GetVisibilityTimeoutMs(),
	}}}}}
	item, err := m.settle(ctx, r, cmd)
	if err != nil {
		return nil, err
	}
	return &raftqv1.ExtendLeaseResponse{LeaseDeadlineMs: item.GetLeaseDeadlineMs()}, nil
}

func (m *messages) DeadLetter(ctx context.Context, req *raftqv1.DeadLetterRequest) (*raftqv1.DeadLetterResponse, error) {
	if err := m.ready(ctx); err != nil {
		return nil, err
	}
	r, err := m.shardOf(req.GetReceipt())
	if err != nil {
		return nil, err
	}
	if len(req.GetError()) > fsm.MaxErrorLen {
		return nil, invalid("error text of %d bytes above the limit %d", len(req.GetError()), fsm.MaxErrorLen)
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_DeadLetter{DeadLetter: &fsmpb.DeadLetter{Items: []*fsmpb.DeadLetterItem{{
		Receipt: fsmReceipt(r), Error: req.GetError(),
	}}}}}
	if _, err := m.settle(ctx, r, cmd); err != nil {
		return nil, err
	}
	return &raftqv1.DeadLetterResponse{}, nil
}

func (s *Server) getMessage(ctx context.Context, id string) (wire.MessageID, *fsmpb.Message, error) {
	mid, err := wire.ParseMessageID(id)
	if err != nil {
		return mid, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.ready(ctx); err != nil {
		return mid, nil, err
	}
	if n := s.router.ShardCount(); mid.Shard >= n {
		return mid, nil, invalid("message id names shard %d, the cluster has %d", mid.Shard, n)
	}
	resp, err := s.router.Read(ctx, &peerpb.ShardReadRequest{ShardId: mid.Shard, Query: &peerpb.ShardReadRequest_GetMessageId{GetMessageId: mid.ID}})
	if err != nil {
		return mid, nil, s.toStatus(ctx, fmt.Errorf("read message %s: %w", id, err))
	}
	if resp.GetMessage() == nil {
		return mid, nil, status.Errorf(codes.NotFound, "message %s not found (never existed, or acked longer ago than the queue's completed retention)", id)
	}
	return mid, resp.GetMessage(), nil
}

func (m *messages) GetMessage(ctx context.Context, req *raftqv1.GetMessageRequest) (*raftqv1.MessageInfo, error) {
	_, msg, err := m.getMessage(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	if err := allowed(ctx, "/raftq.v1.Messages/GetMessage", permRead, msg.GetQueue()); err != nil {
		return nil, err
	}
	out := messageFromFSM(msg)
	if m.receipts.Load() != nil {
		hideLiveLease(out)
	}
	return &raftqv1.MessageInfo{MessageId: req.GetMessageId(), Message: out}, nil
}

func (m *messages) CancelMessage(ctx context.Context, req *raftqv1.CancelMessageRequest) (*raftqv1.CancelMessageResponse, error) {
	mid, msg, err := m.getMessage(ctx, req.GetMessageId())
	if err != nil {
		return nil, err
	}
	if err := allowed(ctx, "/raftq.v1.Messages/CancelMessage", permSend, msg.GetQueue()); err != nil {
		return nil, err
	}
	cmd := &fsmpb.Command{Cmd: &fsmpb.Command_Cancel{Cancel: &fsmpb.Cancel{Queue: msg.GetQueue(), MessageIds: []uint64{mid.ID}}}}
	if item, err := m.one(ctx, mid.Shard, cmd); err != nil {
		if item != nil {
			// The FSM's reason does not name the message: it only knows
			// the shard-local id.
			st := item.GetStatus()
			return nil, status.Error(grpcCode(st.GetCode()), fmt.Sprintf("message %s: %s", mid, st.GetMessage()))
		}
		return nil, err
	}
	return &raftqv1.CancelMessageResponse{}, nil
}
