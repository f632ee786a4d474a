package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/shard"
	"github.com/raftq/raftq/wire"
)

// slotTopo is a cluster of n shards, all led by node "b" (a slotShards
// server), whose slot table a test changes between calls, as meta does
// when it moves slots.
type slotTopo struct {
	n    uint32
	addr string

	mu    sync.Mutex
	table wire.SlotTable
	peers map[uint32][]PriorOwner // DedupPeers by slot
}

func (t *slotTopo) NodeID() string                 { return "a" }
func (t *slotTopo) ShardCount() uint32             { return t.n }
func (t *slotTopo) LocalShard(uint32) *shard.Shard { return nil }
func (t *slotTopo) ShardReplicas(uint32) []string  { return []string{"b"} }
func (t *slotTopo) NoteLeader(uint32, string)      {}
func (t *slotTopo) MemberGRPC(string) (string, bool) {
	return t.addr, true
}
func (t *slotTopo) MemberPeer(string) (string, bool) { return t.addr, true }
func (t *slotTopo) ShardLeader(uint32) (string, string, bool) {
	return "b", t.addr, true
}

func (t *slotTopo) DedupPeers(_ string, slot uint32) []PriorOwner {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[slot]
}

func (t *slotTopo) SlotTable() wire.SlotTable {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.table
}

// move gives slot to shard in the table (materializing the owners, as
// meta's first growth does).
func (t *slotTopo) move(slot, to uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	owners := make([]uint32, t.table.Slots)
	for s := range owners {
		owners[s] = t.table.Owner(uint32(s))
	}
	owners[slot] = to
	t.table = wire.SlotTable{Slots: t.table.Slots, Owners: owners}
}

// slotShards serves every shard's applies as its leader: an enqueue item
// whose slot the shard sealed is refused with CODE_SLOT_MOVED (nothing
// kept), the others are kept. It records what each shard was asked and
// took.
type slotShards struct {
	peerpb.UnimplementedPeerServer
	slots uint32

	mu      sync.Mutex
	sealed  map[uint32]map[uint32]bool   // shard -> slot -> sealed
	applies map[uint32][][]string        // shard -> the messages (bodies) of each apply
	took    map[string]uint32            // body -> shard that kept it
	keys    map[uint32]map[string]uint64 // shard -> dedup key -> message id
	nextID  uint64
}

// ShardRead answers dedup look-ups as a shard that sealed the probes'
// slots does, and refuses them for a slot it has not sealed.
func (s *slotShards) ShardRead(_ context.Context, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &peerpb.ShardReadResponse{}
	for _, p := range req.GetDedupLookup().GetProbes() {
		if !s.sealed[req.GetShardId()][p.GetSlot()] {
			return nil, &NotSealedError{Shard: req.GetShardId(), Slot: p.GetSlot(), Move: p.GetMoveId()}
		}
		resp.DedupMessageIds = append(resp.DedupMessageIds, s.keys[req.GetShardId()][p.GetKey()])
	}
	return resp, nil
}

func (s *slotShards) seal(shard, slot uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed[shard] == nil {
		s.sealed[shard] = map[uint32]bool{}
	}
	s.sealed[shard][slot] = true
}

func (s *slotShards) ShardApply(_ context.Context, req *peerpb.ShardApplyRequest) (*peerpb.ShardApplyResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	enq := req.GetCommand().GetEnqueue()
	var bodies []string
	res := &fsmpb.EnqueueResult{}
	for _, m := range enq.GetMessages() {
		bodies = append(bodies, string(m.GetBody()))
		slot, keyed := wire.SlotForMessage(enq.GetQueue(), m.GetGroupId(), m.GetDedupKey(), s.slots)
		if keyed && s.sealed[req.GetShardId()][slot] {
			res.Items = append(res.Items, &fsmpb.EnqueueItemResult{Status: &fsmpb.Status{Code: fsmpb.Code_CODE_SLOT_MOVED, Message: "slot sealed"}})
			continue
		}
		if id := s.keys[req.GetShardId()][m.GetDedupKey()]; id != 0 {
			res.Items = append(res.Items, &fsmpb.EnqueueItemResult{Status: &fsmpb.Status{}, MessageId: id, Deduplicated: true})
			continue
		}
		s.nextID++
		s.took[string(m.GetBody())] = req.GetShardId()
		if k := m.GetDedupKey(); k != "" {
			if s.keys[req.GetShardId()] == nil {
				s.keys[req.GetShardId()] = map[string]uint64{}
			}
			s.keys[req.GetShardId()][k] = s.nextID
		}
		res.Items = append(res.Items, &fsmpb.EnqueueItemResult{Status: &fsmpb.Status{}, MessageId: s.nextID})
	}
	s.applies[req.GetShardId()] = append(s.applies[req.GetShardId()], bodies)
	return &peerpb.ShardApplyResponse{Result: &fsmpb.Result{Status: &fsmpb.Status{}, Body: &fsmpb.Result_Enqueue{Enqueue: res}}}, nil
}

// tookBy is the shard that kept the message with body, if any.
func (s *slotShards) tookBy(body string) (uint32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.took[body]
	return id, ok
}

// appliesTo is how many applies shard got, and the bodies of each.
func (s *slotShards) appliesTo(shard uint32) [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.applies[shard]...)
}

// newSlotCluster serves n shards in the bootstrap layout behind a router
// that waits leaderWait for moves.
func newSlotCluster(t *testing.T, n uint32, leaderWait time.Duration) (*Router, *slotTopo, *slotShards) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &slotShards{slots: n * wire.SlotsPerShard, sealed: map[uint32]map[uint32]bool{},
		applies: map[uint32][][]string{}, took: map[string]uint32{}, keys: map[uint32]map[string]uint64{}}
	gs := grpc.NewServer()
	peerpb.RegisterPeerServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	topo := &slotTopo{n: n, addr: lis.Addr().String(), table: wire.DefaultSlotTable(n)}
	r := New(topo, Options{LeaderWait: leaderWait, PeerProbe: testProbe})
	t.Cleanup(func() { _ = r.Close() })
	return r, topo, srv
}

// keyOn finds a dedup key whose slot the bootstrap layout of n shards
// gives to shard.
func keyOn(queue string, shard, n uint32) (key string, slot uint32) {
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		if s, _ := wire.ShardForMessage(queue, "", k, n); s == shard {
			slot, _ = wire.SlotForMessage(queue, "", k, n*wire.SlotsPerShard)
			return k, slot
		}
	}
}

func keyed(body, key string) *fsmpb.NewMessage {
	return &fsmpb.NewMessage{Body: []byte(body), DedupKey: key}
}

// A keyed send goes where the table places its slot now: after the table
// moves the slot, the next send goes to the new owner, and ShardForSend
// says so too.
func TestSendFollowsTheSlotTable(t *testing.T) {
	r, topo, srv := newSlotCluster(t, 2, time.Second)
	ctx := ctxT(t, 10*time.Second)
	key, slot := keyOn("q", 0, 2)
	sent, err := r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("before", key)})
	if err != nil || sent[0].Err != nil || sent[0].Shard != 0 {
		t.Fatalf("send before the move = %+v, %v; want shard 0", sent, err)
	}
	topo.move(slot, 1)
	if id, err := r.ShardForSend("q", "", key); err != nil || id != 1 {
		t.Fatalf("ShardForSend after the move = %d, %v; want 1", id, err)
	}
	sent, err = r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("after", key)})
	if err != nil || sent[0].Err != nil || sent[0].Shard != 1 {
		t.Fatalf("send after the move = %+v, %v; want shard 1", sent, err)
	}
	if got, _ := srv.tookBy("after"); got != 1 {
		t.Fatalf("the message was kept by shard %d, want 1", got)
	}
}

// A shard that sealed the slot refuses the message; the router does not
// resend it there but waits for the table to name the new owner, then
// sends it there.
func TestSendResendsSlotMovedToTheNewOwner(t *testing.T) {
	r, topo, srv := newSlotCluster(t, 2, 5*time.Second)
	ctx := ctxT(t, 10*time.Second)
	key, slot := keyOn("q", 0, 2)
	srv.seal(0, slot)
	go func() {
		time.Sleep(150 * time.Millisecond)
		topo.move(slot, 1)
	}()
	start := time.Now()
	sent, err := r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("m", key)})
	if err != nil || sent[0].Err != nil {
		t.Fatalf("send = %+v, %v", sent, err)
	}
	if by, _ := srv.tookBy("m"); sent[0].Shard != 1 || sent[0].Item.GetStatus().GetCode() != fsmpb.Code_CODE_OK || by != 1 {
		t.Fatalf("send answered by shard %d (%v), kept by %d; want the new owner 1", sent[0].Shard, sent[0].Item.GetStatus(), by)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("send returned after %v, before the table moved", d)
	}
	if got := srv.appliesTo(0); len(got) != 1 {
		t.Fatalf("the sealed shard got %d applies, want 1: the router resent before the table moved", len(got))
	}
}

// A slot whose table does not move within LeaderWait answers a
// *SlotMovingError (Unavailable at the server), after about LeaderWait
// and without resending to the shard that sealed it.
func TestSendSlotStillMovingAfterLeaderWait(t *testing.T) {
	const wait = 300 * time.Millisecond
	r, _, srv := newSlotCluster(t, 2, wait)
	ctx := ctxT(t, 10*time.Second)
	key, slot := keyOn("q", 1, 2)
	srv.seal(1, slot)
	start := time.Now()
	sent, err := r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("m", key)})
	d := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var sme *SlotMovingError
	if !errors.As(sent[0].Err, &sme) || sme.Slot != slot || !sme.Keyed || sme.Shard != 1 || sme.Queue != "q" {
		t.Fatalf("send = %+v; want a *SlotMovingError for slot %d on shard 1", sent[0], slot)
	}
	want := fmt.Sprintf("slot %d of queue \"q\" is moving between shards; retry", slot)
	if sme.Error() != want {
		t.Fatalf("error %q, want %q", sme.Error(), want)
	}
	if d < wait || d > wait+2*time.Second {
		t.Fatalf("gave up after %v, want about %v", d, wait)
	}
	if got := srv.appliesTo(1); len(got) != 1 {
		t.Fatalf("the sealed shard got %d applies, want 1", len(got))
	}
	// The caller's context ends the wait first when it is shorter.
	short, cancel := context.WithTimeout(ctx, wait/3)
	defer cancel()
	sent, err = r.Send(short, "q", []*fsmpb.NewMessage{keyed("m2", key)})
	if err != nil || !errors.Is(sent[0].Err, context.DeadlineExceeded) {
		t.Fatalf("send with a short deadline = %+v, %v; want DeadlineExceeded", sent, err)
	}
}

// In a batch only the refused messages are resent, to the new owner; the
// others are answered by their first shard, and skipped (nil) messages
// answer nothing.
func TestSendBatchResendsOnlyMovedItems(t *testing.T) {
	r, topo, srv := newSlotCluster(t, 2, 5*time.Second)
	ctx := ctxT(t, 10*time.Second)
	k0, s0 := keyOn("q", 0, 2)
	k1, _ := keyOn("q", 1, 2)
	var kStay string // another key on shard 0, in another slot
	for i := 0; ; i++ {
		k := fmt.Sprintf("stay%d", i)
		sh, _ := wire.ShardForMessage("q", "", k, 2)
		sl, _ := wire.SlotForMessage("q", "", k, 512)
		if sh == 0 && sl != s0 {
			kStay = k
			break
		}
	}
	srv.seal(0, s0)
	go func() {
		time.Sleep(100 * time.Millisecond)
		topo.move(s0, 1)
	}()
	msgs := []*fsmpb.NewMessage{keyed("moved", k0), nil, keyed("stay", kStay), keyed("other", k1), {Body: []byte("free")}}
	sent, err := r.Send(ctx, "q", msgs)
	if err != nil {
		t.Fatal(err)
	}
	wantShard := map[int]uint32{0: 1, 2: 0, 3: 1}
	for i, want := range wantShard {
		if sent[i].Err != nil || sent[i].Shard != want || sent[i].Item.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
			t.Errorf("item %d = %+v; want taken by shard %d", i, sent[i], want)
		}
	}
	if sent[1] != (Sent{}) {
		t.Errorf("a nil message answered %+v", sent[1])
	}
	if sent[4].Err != nil || sent[4].Item.GetStatus().GetCode() != fsmpb.Code_CODE_OK {
		t.Errorf("the unkeyed message = %+v", sent[4])
	}
	var resent [][]string
	for _, a := range srv.appliesTo(1) {
		for _, b := range a {
			if b == "moved" {
				resent = append(resent, a)
			}
		}
	}
	if len(resent) != 1 || len(resent[0]) != 1 {
		t.Fatalf("applies on shard 1 carrying the moved message: %v; want one, with it alone", resent)
	}
	if n := len(srv.appliesTo(0)); n != 1 {
		t.Fatalf("shard 0 got %d applies, want 1", n)
	}
}

// After a slot moves, a keyed send asks the slot's prior owner for its
// dedup key first: a key the prior owner took makes the send a duplicate
// of that message (the new owner gets nothing), a key it does not hold
// goes to the new owner, and a prior owner that cannot answer (it has not
// applied the seal) keeps the send from going anywhere.
func TestSendAsksPriorOwnersForDedupKeys(t *testing.T) {
	r, topo, srv := newSlotCluster(t, 2, time.Second)
	ctx := ctxT(t, 10*time.Second)
	key, slot := keyOn("q", 0, 2)
	sent, err := r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("first", key)})
	if err != nil || sent[0].Err != nil || sent[0].Shard != 0 {
		t.Fatalf("send before the move = %+v, %v", sent, err)
	}
	first := sent[0].Item.GetMessageId()

	srv.seal(0, slot)
	topo.move(slot, 1)
	topo.mu.Lock()
	topo.peers = map[uint32][]PriorOwner{slot: {{Shard: 0, Move: 7}}}
	topo.mu.Unlock()
	sent, err = r.Send(ctx, "q", []*fsmpb.NewMessage{keyed("again", key), keyed("new", "fresh-key")})
	if err != nil {
		t.Fatal(err)
	}
	if s := sent[0]; s.Err != nil || s.Shard != 0 || !s.Item.GetDeduplicated() || s.Item.GetMessageId() != first {
		t.Fatalf("resend of a key the prior owner holds = %+v; want a duplicate of 0-%x", s, first)
	}
	if _, ok := srv.tookBy("again"); ok {
		t.Fatal("the duplicate was stored")
	}
	for _, a := range srv.appliesTo(1) {
		for _, b := range a {
			if b == "again" {
				t.Fatal("the duplicate reached the new owner")
			}
		}
	}
	if s := sent[1]; s.Err != nil || s.Item.GetDeduplicated() {
		t.Fatalf("a key nobody holds = %+v; want it sent", s)
	}

	other, otherSlot := keyOn("q2", 1, 2)
	topo.mu.Lock()
	topo.peers = map[uint32][]PriorOwner{otherSlot: {{Shard: 0, Move: 8}}} // shard 0 did not seal it
	topo.mu.Unlock()
	sent, err = r.Send(ctx, "q2", []*fsmpb.NewMessage{keyed("blocked", other)})
	var pe *PriorLookupError
	if err != nil || !errors.As(sent[0].Err, &pe) || pe.Shard != 0 {
		t.Fatalf("send with an unanswered look-up = %+v, %v; want a *PriorLookupError for shard 0", sent, err)
	}
	if _, ok := srv.tookBy("blocked"); ok {
		t.Fatal("a send whose look-up failed was stored")
	}
}
