// Package clienttest runs a small, real raftq gRPC server with an in-memory
// queue, for tests of code built on the client and worker SDKs (as
// net/http/httptest does for HTTP). It serves the Cluster, Queues, Messages
// and DeadLetters services of api/raftqv1 with the contract's shape —
// leases with epochs and receipts, stale receipts rejected, nack delays,
// dead-lettering at the max receive count — but none of its durability: it
// is one process, one shard, wall-clock time. Tests can inject failures per
// method and see every settle call the server received.
package clienttest

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Server is a running fake node. Its messages all live on shard Shard.
type Server struct {
	Addr   string
	NodeID string
	Shard  uint32

	grpc *grpc.Server

	mu         sync.Mutex
	wake       chan struct{} // closed and replaced when a message may be ready
	shardCount uint32
	leaders    []string // shard -> leader gRPC address, for ShardMap
	slots      uint32   // slot table for ShardMap (SetSlotTable); 0: none sent
	slotOwners []uint32
	queues     map[string]*raftqv1.QueueInfo
	msgs       map[uint64]*raftqv1.Message
	order      []uint64 // enqueue order
	nextID     uint64
	nextEpoch  uint64
	faults     map[string][]fault
	forwards   map[string][]string // method -> trailers of the next answers
	calls      []Call
	staleIDs   map[string]bool
	dedup      map[string]uint64
	untilDone  map[uint64]bool          // ids whose dedup key is held only while they are live
	itemFaults []codes.Code             // SendBatch: next items' outcomes
	itemHint   string                   // raftq-leader-hint on calls with failed items
	itemRetry  time.Duration            // retry_after_ms of RESOURCE_EXHAUSTED items
	stalls     map[string]chan struct{} // method -> closed on release
	stalled    map[string]int           // calls waiting in a stall
	// moves counts what the calls moved, by queue and event, for
	// QueueStats.moves: sends, leases and settles. Lease expiry,
	// automatic dead-lettering and retention, lazy here, are not counted.
	moves map[string]map[string]uint64
}

type fault struct {
	code       codes.Code
	refuse     bool
	hint       string
	lose       bool          // serve the call, then answer code instead
	leaderHint string        // raftq-leader-hint on an outcome-unknown failure
	retryAfter time.Duration // > 0: a google.rpc.RetryInfo detail
	msg        string        // the status message; "" for "injected CODE"
}

// Call is one call the server answered, recorded for assertions.
type Call struct {
	Method   string        // short name: "Send", "Ack", "Nack", "ExtendLease", ...
	Receipt  string        // settle calls
	HasDelay bool          // Nack
	Delay    time.Duration // Nack, Snooze
	Error    string        // Nack, DeadLetter; Snooze: its reason
	Items    int           // SendBatch: messages in the call
	Code     codes.Code
}

// NewServer starts a fake node on a loopback port; it stops when t ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatalf("clienttest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Start starts a fake node on a loopback port outside a test (an Example,
// a program's own harness); call Stop when done. Tests use NewServer.
func Start() (*Server, error) { return StartAt("127.0.0.1:0") }

// StartAt is Start on addr ("host:port"): a fake node that comes up where
// a client already looks for one, as a node that is (re)starting does.
func StartAt(addr string) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	s := &Server{
		Addr:       lis.Addr().String(),
		NodeID:     "fake-" + lis.Addr().String(),
		wake:       make(chan struct{}),
		shardCount: 1,
		queues:     map[string]*raftqv1.QueueInfo{},
		msgs:       map[uint64]*raftqv1.Message{},
		faults:     map[string][]fault{},
		forwards:   map[string][]string{},
		staleIDs:   map[string]bool{},
		stalls:     map[string]chan struct{}{},
		stalled:    map[string]int{},
		dedup:      map[string]uint64{},
		untilDone:  map[uint64]bool{},
	}
	s.leaders = []string{s.Addr}
	s.grpc = grpc.NewServer(grpc.UnaryInterceptor(s.intercept))
	raftqv1.RegisterClusterServer(s.grpc, &clusterSvc{s: s})
	raftqv1.RegisterQueuesServer(s.grpc, &queuesSvc{s: s})
	raftqv1.RegisterMessagesServer(s.grpc, &messagesSvc{s: s})
	raftqv1.RegisterDeadLettersServer(s.grpc, &deadSvc{s: s})
	go func() { _ = s.grpc.Serve(lis) }()
	return s, nil
}

// Stop stops the server at once (open calls fail).
func (s *Server) Stop() { s.grpc.Stop() }

// SetShardMap makes ShardMap report len(leaders) shards led at those gRPC
// addresses ("" for a shard without a leader), and moves this server's
// messages to shard.
func (s *Server) SetShardMap(shard uint32, leaders ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Shard = shard
	s.shardCount = uint32(len(leaders))
	s.leaders = slices.Clone(leaders)
}

// SetSlotTable makes ShardMap report a slot table of slots slots, slot s
// owned by shard owners[s] (nil: the bootstrap layout), as a node of a
// cluster whose shard count grew does. Without it ShardMap sends none, as
// nodes that predate slot tables do. The server still keeps every message
// it is sent: it does not re-route.
func (s *Server) SetSlotTable(slots uint32, owners []uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots, s.slotOwners = slots, slices.Clone(owners)
}

// Fail makes the next n calls of method (short name, e.g. "Send") fail with
// code and no refusal trailer: for UNAVAILABLE, an outcome the client must
// treat as unknown.
func (s *Server) Fail(method string, n int, code codes.Code) {
	s.addFaults(method, n, fault{code: code})
}

// LagFormat makes the next n calls of method fail as a node refuses a call
// that some replica's binary predates during a rolling upgrade:
// FAILED_PRECONDITION naming the log format it needs (client.ErrUpgradePending).
func (s *Server) LagFormat(method string, n int) {
	s.addFaults(method, n, fault{code: codes.FailedPrecondition,
		msg: "shard-0: command " + method + " needs log format 7, which replicas n3 (format 6) do not support yet: upgrade them first"})
}

// Exhaust makes the next n calls of method fail as an overloaded node
// refuses them: RESOURCE_EXHAUSTED with a RetryInfo detail asking the
// client to come back after retry (nothing applied).
func (s *Server) Exhaust(method string, n int, retry time.Duration) {
	s.addFaults(method, n, fault{code: codes.ResourceExhausted, retryAfter: retry})
}

// Refuse makes the next n calls of method fail as a follower refuses them:
// UNAVAILABLE with the "raftq-leader" trailer set to hint ("nodeID=addr",
// or "" when no leader is known), meaning nothing was applied.
func (s *Server) Refuse(method string, n int, hint string) {
	s.addFaults(method, n, fault{code: codes.Unavailable, refuse: true, hint: hint})
}

// FailHint makes the next n calls of method fail as a node does when a
// call it forwarded was cut off: UNAVAILABLE with an unknown outcome (no
// refusal trailer) and the "raftq-leader-hint" trailer naming the leader
// ("nodeID=addr").
func (s *Server) FailHint(method string, n int, hint string) {
	s.addFaults(method, n, fault{code: codes.Unavailable, leaderHint: hint})
}

// Forward makes the next n successful answers of method carry the
// "raftq-shard-leader" trailer with value ("shard:nodeID=addr"), as a
// node does when it served the call by forwarding it to that leader. The
// call itself is served here as usual.
func (s *Server) Forward(method string, n int, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.forwards[method] = append(s.forwards[method], value)
	}
}

// LoseAnswer makes the next n calls of method be served as usual and then
// answer UNAVAILABLE without the refusal trailer, as when the connection
// breaks after the node applied the call: the client sees an unknown
// outcome for a call that took effect.
func (s *Server) LoseAnswer(method string, n int) {
	s.addFaults(method, n, fault{code: codes.Unavailable, lose: true})
}

func (s *Server) addFaults(method string, n int, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[method] = append(s.faults[method], f)
	}
}

// FailItems makes the next n messages of SendBatch calls fail with code as
// items (the call itself succeeds), enqueueing nothing: how a node reports
// messages its shard could not commit.
func (s *Server) FailItems(n int, code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.itemFaults = append(s.itemFaults, code)
	}
}

// ExhaustItems makes the next n SendBatch items refused as a quota or a
// full send queue refuses them: RESOURCE_EXHAUSTED with retry_after_ms
// asking the client to come back after retry (nothing enqueued).
func (s *Server) ExhaustItems(n int, retry time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.itemRetry = retry
	for range n {
		s.itemFaults = append(s.itemFaults, codes.ResourceExhausted)
	}
}

// HintItems makes SendBatch calls whose items fail (FailItems) carry the
// "raftq-leader-hint" trailer with hint, as a node does when it could not
// reach the shard's leader it names; "" stops it.
func (s *Server) HintItems(hint string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.itemHint = hint
}

// Stall holds every call of method until the returned release is called
// (tests of client-side batching use it to let calls pile up).
func (s *Server) Stall(method string) (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.stalls[method] = ch
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.stalls, method)
			s.mu.Unlock()
			close(ch)
		})
	}
}

// Stalled is how many calls of method wait in a Stall now.
func (s *Server) Stalled(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled[method]
}

// StaleExtend makes every ExtendLease of message id answer
// FAILED_PRECONDITION, as if its lease had been granted again.
func (s *Server) StaleExtend(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.staleIDs[id] = true
}

// Calls returns the recorded calls of method ("" for all).
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// State is a message's state as Count takes it: the names
// client.MessageInfo.State uses.
type State string

// The states of a message.
const (
	Ready   State = "ready"
	Delayed State = "delayed"
	Leased  State = "leased"
	Acked   State = "acked"
	Dead    State = "dead"
)

var protoStates = map[State]raftqv1.State{
	Ready: raftqv1.State_STATE_READY, Delayed: raftqv1.State_STATE_DELAYED, Leased: raftqv1.State_STATE_LEASED,
	Acked: raftqv1.State_STATE_ACKED, Dead: raftqv1.State_STATE_DEAD,
}

// Count returns how many messages of queue are in state (0 for a state
// it does not know).
func (s *Server) Count(queue string, state State) int {
	want, ok := protoStates[state]
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if m.GetQueue() == queue && s.stateOf(m, time.Now()) == want {
			n++
		}
	}
	return n
}

// intercept applies injected faults and records each call.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[lastSlash(info.FullMethod)+1:]
	s.mu.Lock()
	if fs := s.faults[method]; len(fs) > 0 && !fs[0].lose {
		f := fs[0]
		s.faults[method] = fs[1:]
		s.calls = append(s.calls, Call{Method: method, Code: f.code})
		s.mu.Unlock()
		if f.refuse {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-leader", f.hint))
		}
		if f.leaderHint != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-leader-hint", f.leaderHint))
		}
		msg := f.msg
		if msg == "" {
			msg = "injected " + f.code.String()
		}
		st := status.New(f.code, msg)
		if f.retryAfter > 0 {
			if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(f.retryAfter)}); err == nil {
				st = d
			}
		}
		return nil, st.Err()
	}
	// Faults are decided on arrival, before a stall: a call held in a
	// stall keeps the outcome it arrived to.
	if ch, ok := s.stalls[method]; ok {
		s.stalled[method]++
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.stalled[method]--
	}
	var forward string
	if fw := s.forwards[method]; len(fw) > 0 {
		forward, s.forwards[method] = fw[0], fw[1:]
	}
	lost := false
	if fs := s.faults[method]; len(fs) > 0 && fs[0].lose {
		lost, s.faults[method] = true, fs[1:]
	}
	s.mu.Unlock()
	resp, err := handler(ctx, req)
	if lost {
		s.record(Call{Method: method, Code: codes.Unavailable})
		return nil, status.Error(codes.Unavailable, "injected: answer lost after the call was applied")
	}
	if err == nil && forward != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("raftq-shard-leader", forward))
	}
	c := Call{Method: method, Code: status.Code(err)}
	switch r := req.(type) {
	case *raftqv1.NackRequest:
		c.Receipt, c.HasDelay, c.Delay, c.Error = r.GetReceipt(), r.GetHasDelay(), time.Duration(r.GetDelayMs())*time.Millisecond, r.GetError()
	case *raftqv1.SnoozeRequest:
		c.Receipt, c.Delay, c.Error = r.GetReceipt(), time.Duration(r.GetDelayMs())*time.Millisecond, r.GetReason()
	case *raftqv1.ExtendLeaseRequest:
		c.Receipt = r.GetReceipt()
	case *raftqv1.DeadLetterRequest:
		c.Receipt, c.Error = r.GetReceipt(), r.GetError()
	case *raftqv1.SendBatchRequest:
		c.Items = len(r.GetMessages())
	}
	if method == "Ack" {
		for _, r := range req.(*raftqv1.AckRequest).GetReceipts() {
			c.Receipt = r
			s.record(c)
		}
		return resp, err
	}
	s.record(c)
	return resp, err
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// notify wakes long polls; callers hold s.mu.
func (s *Server) notify() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// moved counts n messages of queue making the move ev (QueueStats.moves);
// callers hold s.mu.
func (s *Server) moved(queue, ev string, n uint64) {
	if s.moves == nil {
		s.moves = map[string]map[string]uint64{}
	}
	if s.moves[queue] == nil {
		s.moves[queue] = map[string]uint64{}
	}
	s.moves[queue][ev] += n
}
