package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftstore"
	"google.golang.org/protobuf/proto"
)

// Group-commit limits. The proposer works in rounds: it takes what callers
// have queued (up to maxRoundBytes) and hands it to raft as a burst of small
// entries (each at most maxEntryCommands commands and about maxEntryBytes),
// which raft's leader loop stores with one StoreLogs call — one bolt
// transaction and one fsync — and replicates in one AppendEntries per
// follower (BatchApplyCh, MaxAppendEntries).
//
// Small entries matter because of how bolt stores the log: values live
// inline in leaf pages, so every commit rewrites the last leaf and with it
// a few earlier entries. With one large entry per commit that rewrite is 5
// to 8 times the new data (docs/benchmarks.md, "Write amplification");
// with many small entries per commit it is about 1.2 times.
//
// At most maxInFlightRounds rounds and maxInFlightBytes are inside raft at
// once (always at least one round): while raft stores and replicates them,
// new requests pile up and the next round is larger. A backlog of sends
// waits in front of the proposer, where consumer commands pass it (see
// runProposer's lanes and admit), not inside raft, where nothing can.
const (
	maxEntryCommands = 1024
	maxEntryBytes    = 16 << 10
	maxRoundBytes    = 1 << 20
	maxInFlightBytes = 4 << 20
	// Enough rounds to keep raft's pipeline busy (one being stored and
	// replicated while the next fills); more only queue consumer commands
	// behind more sends.
	maxInFlightRounds = 2
	// One more round may be in flight if it holds fast-lane commands only
	// (see admit); they are small, so it is not charged against the bytes.
	reservedFastRounds = 1
	proposeQueue       = 4096
	// lostAnswerWait is how long a handed proposal still waits for its
	// outcome once leadership is lost (see proposeReq).
	lostAnswerWait = 100 * time.Millisecond
)

// Request hand-off states: a request is either cancelled by its caller or
// taken by the proposer, never both.
const (
	reqQueued int32 = iota
	reqHanded
	reqCancelled
)

type proposal struct {
	cmd  *fsmpb.Command
	size int
	// holdClock: propose alone, stamped with the FSM clock instead of the
	// leader's wall clock, so the entry cannot advance time (and expire
	// leases or release delays) before its command applies. LeaderGrace
	// needs this: a new leader whose clock runs ahead would otherwise expire
	// earlier-term leases in the very entry that is meant to protect them.
	holdClock bool
	state     atomic.Int32
	done      chan outcome // buffered 1
	// split is set when a large enqueue travels as consecutive parts in
	// consecutive entries; only the completer touches it.
	split *splitState
}

type outcome struct {
	res *fsmpb.Result
	err error
	n   int // split parts: messages in the part
}

// part is one command inside an entry: a whole proposal, or part i of a
// split one.
type part struct {
	p   *proposal
	cmd *fsmpb.Command
	i   int
}

// batch is one log entry in flight and the callers waiting on it.
type batch struct {
	parts  []part
	bytes  int
	last   bool // last entry of its round
	future raft.ApplyFuture
}

// Propose applies cmd through raft, coalesced with concurrent calls into one
// log entry, and returns its own Result. Only the leader proposes.
//
// Errors: raftgroup.NotLeaderError (nothing proposed; retry at the hint), ctx.Err()
// when ctx ended before the command was handed to raft (dropped),
// raftgroup.ErrUnknownResult when the outcome is indeterminate, ErrShutdown.
func (s *Shard) Propose(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	if cmd == nil {
		return nil, errors.New("shard: nil command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	if e, send := cmd.GetCmd().(*fsmpb.Command_Enqueue); send {
		if s.cfg.AdmitSend != nil {
			if err := s.cfg.AdmitSend(); err != nil {
				return nil, err
			}
		}
		q := e.Enqueue.GetQueue()
		if res := s.refuseFull(e.Enqueue); res != nil {
			return res, nil
		}
		if err := s.rates.admit(q, s.fsm.ShardQuota(q), len(e.Enqueue.GetMessages()), time.Now()); err != nil {
			return nil, err
		}
	}
	return s.propose(ctx, cmd)
}

// propose skips the readiness gate; leader duties use it to propose the
// grace before the shard is ready.
func (s *Shard) propose(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	return s.proposeReq(ctx, &proposal{cmd: cmd})
}

func (s *Shard) proposeReq(ctx context.Context, p *proposal) (*fsmpb.Result, error) {
	if err := s.checkFormat(p.cmd); err != nil {
		return nil, err
	}
	p.size = proto.Size(p.cmd)
	p.done = make(chan outcome, 1)
	// lost ends the wait when this replica stops leading. raft answers the
	// futures of a leader that steps down itself, but not of one whose
	// loop is stuck (a stalled disk) and was sidelined (sideline.go).
	lost := s.lead.Load().lost
	if e, bulk := p.cmd.GetCmd().(*fsmpb.Command_Enqueue); bulk && !p.holdClock {
		// The fair send queue (sendqueue.go). A send queued after the
		// proposer stopped is answered by the proposerDone case below.
		q := e.Enqueue.GetQueue()
		weight := float64(s.fsm.ShardQuota(q).GetTenantWeight())
		if err := s.sends.push(p, q, weight, s.maxQueuedSend(), s.cfg.ID, time.Now()); err != nil {
			return nil, err
		}
	} else {
		select {
		case s.fastCh <- p:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return nil, ErrShutdown
		}
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(reqQueued, reqCancelled) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", raftgroup.ErrUnknownResult, ctx.Err())
	case <-lost:
		if p.state.CompareAndSwap(reqQueued, reqCancelled) {
			return nil, s.notLeader()
		}
		// A leader that steps down itself answers its futures first (a
		// failed append says "not applied"), and the completer passes
		// that on moments later; a stuck one never answers.
		t := time.NewTimer(lostAnswerWait)
		defer t.Stop()
		select {
		case o := <-p.done:
			return o.res, o.err
		case <-t.C:
			return nil, fmt.Errorf("%w: leadership lost", raftgroup.ErrUnknownResult)
		}
	case <-s.proposerDone:
		// The proposer exited; a request it never took is dropped here,
		// one it took is answered by the completer.
		if p.state.CompareAndSwap(reqQueued, reqCancelled) {
			return nil, ErrShutdown
		}
		o := <-p.done
		return o.res, o.err
	}
}

// checkFormat refuses cmd with a *fsm.FormatLagError, before it is
// queued, if a replica (voter or nonvoter) of this shard has not recorded
// the log format its kind needs: a replica without the kind would stop on
// it (fsm.IgnorableKindMin). Kinds of the base format, all of today's,
// pass on one comparison.
func (s *Shard) checkFormat(cmd *fsmpb.Command) error {
	need := fsm.CommandFormat(cmd)
	if s.cfg.kindFormat != nil {
		need = s.cfg.kindFormat(cmd)
	}
	if need <= fsm.BaseFormat {
		return nil
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("shard %d: configuration: %w", s.cfg.ID, err)
	}
	servers := f.Configuration().Servers
	ids := make([]string, len(servers))
	for i, srv := range servers {
		ids[i] = string(srv.ID)
	}
	return fsm.CheckFormat(GroupName(s.cfg.ID), fsm.KindName(cmd), need, ids, s.cfg.NodeFormat)
}

// runProposer packs queued proposals into rounds of entries. It waits for
// room in the in-flight window before collecting, so while raft is busy
// requests pile up and the next round is larger: batching grows exactly
// when it pays.
//
// Two lanes feed it: sends (bulk) and everything else (fast: receives,
// acks, nacks, extends, ticks, leader duties). A round takes the fast lane
// first, so consumers and leases are never queued behind a backlog of
// sends: under overload producers wait, while the messages already
// accepted keep flowing out. Fast commands are small and bounded by what
// is leasable, so they cannot starve sends.
func (s *Shard) runProposer() {
	defer s.wg.Done()
	defer close(s.proposerDone)
	win := newWindow()
	inflight := make(chan *batch, 4*maxInFlightBytes/maxEntryBytes)
	s.wg.Add(1)
	go s.runCompleter(inflight, win)
	defer close(inflight)

	var carry *proposal
	for {
		first, fastOnly, ok := s.admit(win, carry)
		carry = nil
		if !ok {
			s.failQueued(first)
			return
		}
		r := &round{}
		r.take(first)
		for r.bytes < maxRoundBytes && !first.holdClock {
			var p *proposal
			select {
			case p = <-s.fastCh:
			default:
				if !fastOnly {
					p = s.sends.pop(time.Now())
				}
			}
			if p == nil {
				break
			}
			if p.holdClock {
				carry = p
				break
			}
			r.take(p)
		}
		r.close()
		if len(r.entries) == 0 { // all cancelled
			win.release(0, true)
			continue
		}
		win.add(r.bytes)
		s.stats.rounds.Add(1)
		s.stats.bytes.Add(uint64(r.bytes))
		r.entries[len(r.entries)-1].last = true
		hold := first.holdClock
		for _, b := range r.entries {
			s.apply(b, hold)
			inflight <- b
		}
	}
}

// round packs proposals into entries of at most maxEntryBytes and
// maxEntryCommands, splitting an enqueue larger than an entry into parts.
type round struct {
	entries []*batch
	cur     *batch
	bytes   int
}

func (r *round) take(p *proposal) {
	if !p.state.CompareAndSwap(reqQueued, reqHanded) {
		return // cancelled while queued
	}
	cmds := []*fsmpb.Command{p.cmd}
	if p.size > maxEntryBytes {
		if parts := splitEnqueue(p.cmd, maxEntryBytes); len(parts) > 1 {
			cmds = parts
			p.split = newSplitState(len(parts))
		}
	}
	for i, c := range cmds {
		size := p.size
		if len(cmds) > 1 {
			size = proto.Size(c)
		}
		if r.cur != nil && (r.cur.bytes+size > maxEntryBytes || len(r.cur.parts) >= maxEntryCommands) {
			r.entries = append(r.entries, r.cur)
			r.cur = nil
		}
		if r.cur == nil {
			r.cur = &batch{}
		}
		r.cur.parts = append(r.cur.parts, part{p: p, cmd: c, i: i})
		r.cur.bytes += size
		r.bytes += size
	}
}

func (r *round) close() {
	if r.cur != nil {
		r.entries = append(r.entries, r.cur)
		r.cur = nil
	}
}

// admit returns the first proposal of the next round once there is room
// for the round. Any round may start while fewer than maxInFlightRounds
// are in flight. When they are all taken (by sends, under load), a round
// of fast-lane commands alone may still take one reserved slot: a receive
// or an ack then waits for the entries already inside raft, not also for
// a round of sends to finish before it may join them. That wait is most of
// a consumer's receive latency under load, and a consumer that waits less
// takes more of the shard's capacity from producers (docs/shard.md).
//
// pending is a proposal the previous round left over (a holdClock one,
// always fast-lane). ok is false once the shard is closing; first is then
// a proposal the caller must fail.
func (s *Shard) admit(win *window, pending *proposal) (first *proposal, fastOnly, ok bool) {
	for {
		if win.tryAcquire(maxInFlightRounds, true) {
			if pending != nil {
				return pending, false, true
			}
			p := s.next()
			return p, false, p != nil
		}
		if pending != nil && win.tryAcquire(maxInFlightRounds+reservedFastRounds, false) {
			return pending, true, true
		}
		var fast <-chan *proposal
		if pending == nil {
			fast = s.fastCh
		}
		select {
		case <-win.freed:
		case p := <-fast:
			pending = p
		case <-s.closing:
			return pending, false, false
		}
	}
}

// next waits for the first proposal of an entry, fast lane first; nil once
// the shard is closing.
func (s *Shard) next() *proposal {
	select {
	case p := <-s.fastCh:
		return p
	default:
	}
	for {
		select {
		case p := <-s.fastCh:
			return p
		case <-s.sends.ready:
			if p := s.sends.pop(time.Now()); p != nil {
				return p
			}
		case <-s.closing:
			return nil
		}
	}
}

// window bounds the rounds and bytes inside raft.
type window struct {
	mu     sync.Mutex
	rounds int
	bytes  int
	freed  chan struct{} // cap 1: something was released
}

func newWindow() *window { return &window{freed: make(chan struct{}, 1)} }

// tryAcquire takes a round slot if fewer than rounds are in flight and,
// when checkBytes, fewer than maxInFlightBytes. Waiters retry on freed.
func (w *window) tryAcquire(rounds int, checkBytes bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rounds >= rounds || (checkBytes && w.bytes >= maxInFlightBytes) {
		return false
	}
	w.rounds++
	return true
}

// add charges the bytes of the round whose slot was acquired.
func (w *window) add(n int) {
	w.mu.Lock()
	w.bytes += n
	w.mu.Unlock()
}

// release frees n bytes and, at the end of a round, its slot.
func (w *window) release(n int, roundEnd bool) {
	w.mu.Lock()
	w.bytes -= n
	if roundEnd {
		w.rounds--
	}
	w.mu.Unlock()
	kick(w.freed)
}

// apply hands one entry to raft. A holdClock entry is stamped with the FSM
// clock (see proposal.holdClock).
func (s *Shard) apply(b *batch, holdClock bool) {
	now := s.cfg.Now().UnixMilli()
	if holdClock {
		now = s.fsm.Clock()
	}
	e := &fsmpb.Entry{
		Version:  fsm.EntryVersion,
		NowMs:    now,
		Seed:     rand.Uint64(),
		Commands: make([]*fsmpb.Command, len(b.parts)),
	}
	for i, pt := range b.parts {
		e.Commands[i] = pt.cmd
	}
	data, err := fsm.EncodeEntry(e)
	if err != nil {
		b.future = errFuture{fmt.Errorf("shard: encode entry: %w", err)}
		return
	}
	s.stats.entries.Add(1)
	s.stats.commands.Add(uint64(len(b.parts)))
	b.future = s.raft.ApplyLog(raftstore.Command(data), 0)
}

// runCompleter resolves entries in log order and frees their bytes.
func (s *Shard) runCompleter(inflight <-chan *batch, win *window) {
	defer s.wg.Done()
	for b := range inflight {
		s.complete(b)
		win.release(b.bytes, b.last)
	}
}

func (s *Shard) complete(b *batch) {
	// raft never answers futures still sitting in its apply channel when it
	// shuts down, so do not wait on them past shutdown.
	err := raftgroup.WaitFuture(context.Background(), b.future, s.raftDown)
	fail := func(err error) {
		for _, pt := range b.parts {
			pt.resolve(outcome{err: err})
		}
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		fail(fmt.Errorf("%w: %w", raftgroup.ErrUnknownResult, ErrShutdown))
		return
	}
	if _, local := b.future.(errFuture); local {
		fail(err) // failed before raft saw it: definitely not applied
		return
	}
	if err != nil {
		fail(s.applyError(err))
		return
	}
	resp, ok := b.future.Response().(*fsm.Response)
	if !ok || resp == nil || len(resp.Results) != len(b.parts) {
		err := fmt.Errorf("shard: fsm response %T does not match %d commands", b.future.Response(), len(b.parts))
		if rerr, isErr := b.future.Response().(error); isErr {
			err = fmt.Errorf("shard: apply: %w", rerr)
		}
		fail(err)
		return
	}
	for i, pt := range b.parts {
		pt.resolve(outcome{res: resp.Results[i]})
	}
	// hashicorp/raft's log cache keeps the leader's last entries as
	// pointers into their futures (its dispatchLogs stores &applyLog.log),
	// and with them each future's response: without this, the results of
	// the last 512 entries, receive results with every leased body among
	// them, would stay reachable on an idle leader long after the acks.
	resp.Results = nil
}

// applyError maps a raft Apply error to the shard's error semantics.
func (s *Shard) applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raftgroup.ErrNoSpace):
		// Rejected before it reached the log (raft's leaderLoop answers a
		// transfer-in-progress apply without dispatching it; a leader
		// whose append found no space sent the entry nowhere and stepped
		// down, raft's dispatchLogs): definitely not applied, so callers
		// may retry at once elsewhere.
		return s.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrAbortedByRestore):
		// Appended (or possibly appended) by a leader that then stepped
		// down: a new leader may still commit it.
		return fmt.Errorf("%w: %w", raftgroup.ErrUnknownResult, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w: %w", raftgroup.ErrUnknownResult, ErrShutdown, err)
	default:
		return fmt.Errorf("%w: %w", raftgroup.ErrUnknownResult, err)
	}
}

// failQueued answers every request still waiting for the proposer.
func (s *Shard) failQueued(carry *proposal) {
	fail := func(p *proposal) {
		if p != nil && p.state.CompareAndSwap(reqQueued, reqHanded) {
			p.done <- outcome{err: ErrShutdown}
		}
	}
	fail(carry)
	for {
		select {
		case p := <-s.fastCh:
			fail(p)
		default:
			p := s.sends.pop(time.Now())
			if p == nil {
				return
			}
			fail(p)
		}
	}
}

// errFuture is an ApplyFuture that failed before reaching raft.
type errFuture struct{ err error }

func (f errFuture) Error() error          { return f.err }
func (f errFuture) Response() interface{} { return nil }
func (f errFuture) Index() uint64         { return 0 }

// refuseFull answers an enqueue without a raft round when its queue is at
// a limit on its live messages: each item gets the refusal Apply would
// give it. Not when an item has a dedup key: Apply answers a retry of a
// message already in as deduplicated even when the queue is full.
func (s *Shard) refuseFull(e *fsmpb.Enqueue) *fsmpb.Result {
	for _, m := range e.GetMessages() {
		if m.GetDedupKey() != "" {
			return nil
		}
	}
	st := s.fsm.FullStatus(e.GetQueue())
	if st == nil {
		return nil
	}
	items := make([]*fsmpb.EnqueueItemResult, len(e.GetMessages()))
	for i := range items {
		items[i] = &fsmpb.EnqueueItemResult{Status: st}
	}
	return &fsmpb.Result{Status: &fsmpb.Status{Code: fsmpb.Code_CODE_OK}, Body: &fsmpb.Result_Enqueue{Enqueue: &fsmpb.EnqueueResult{Items: items}}}
}
