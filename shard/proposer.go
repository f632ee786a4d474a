package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"google.golang.org/protobuf/proto"
)

// Group-commit limits. One entry holds at most maxEntryCommands commands or
// about maxEntryBytes of encoded commands (a single larger command travels
// alone). maxInFlight entries may be inside raft at once: while raft fsyncs
// one batch, the next ones fill, and raft's leader loop writes all queued
// entries with one StoreLogs (one fsync) — BatchApplyCh + MaxAppendEntries.
const (
	maxEntryCommands = 1024
	maxEntryBytes    = 1 << 20
	maxInFlight      = 16
	proposeQueue     = 4096
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
}

type outcome struct {
	res *fsmpb.Result
	err error
}

// batch is one log entry in flight and the callers waiting on it.
type batch struct {
	reqs   []*proposal
	future raft.ApplyFuture
}

// Propose applies cmd through raft, coalesced with concurrent calls into one
// log entry, and returns its own Result. Only the leader proposes.
//
// Errors: NotLeaderError (nothing proposed; retry at the hint), ctx.Err()
// when ctx ended before the command was handed to raft (dropped),
// ErrUnknownResult when the outcome is indeterminate, ErrShutdown.
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
	return s.propose(ctx, cmd)
}

// propose skips the readiness gate; leader duties use it to propose the
// grace before the shard is ready.
func (s *Shard) propose(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Result, error) {
	return s.proposeReq(ctx, &proposal{cmd: cmd})
}

func (s *Shard) proposeReq(ctx context.Context, p *proposal) (*fsmpb.Result, error) {
	p.size = proto.Size(p.cmd)
	p.done = make(chan outcome, 1)
	select {
	case s.propCh <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closing:
		return nil, ErrShutdown
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		if p.state.CompareAndSwap(reqQueued, reqCancelled) {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrUnknownResult, ctx.Err())
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

// runProposer packs queued proposals into entries. It takes an in-flight
// slot before collecting, so while raft is busy requests pile up and the
// next entry is larger: batching grows exactly when it pays.
func (s *Shard) runProposer() {
	defer s.wg.Done()
	defer close(s.proposerDone)
	sem := make(chan struct{}, maxInFlight)
	inflight := make(chan *batch, maxInFlight)
	s.wg.Add(1)
	go s.runCompleter(inflight, sem)
	defer close(inflight)

	var carry *proposal
	for {
		select {
		case sem <- struct{}{}:
		case <-s.closing:
			s.failQueued(carry)
			return
		}
		first := carry
		carry = nil
		if first == nil {
			select {
			case first = <-s.propCh:
			case <-s.closing:
				<-sem
				s.failQueued(nil)
				return
			}
		}
		b := &batch{reqs: make([]*proposal, 0, 16)}
		bytes := 0
		take := func(p *proposal) {
			if p.state.CompareAndSwap(reqQueued, reqHanded) {
				b.reqs = append(b.reqs, p)
				bytes += p.size
			}
		}
		take(first)
	drain:
		for len(b.reqs) < maxEntryCommands && !first.holdClock {
			select {
			case p := <-s.propCh:
				if p.holdClock || (len(b.reqs) > 0 && bytes+p.size > maxEntryBytes) {
					carry = p
					break drain
				}
				take(p)
			default:
				break drain
			}
		}
		if len(b.reqs) == 0 { // all cancelled
			<-sem
			continue
		}
		s.apply(b)
		inflight <- b
	}
}

func (s *Shard) apply(b *batch) {
	now := s.cfg.Now().UnixMilli()
	if len(b.reqs) == 1 && b.reqs[0].holdClock {
		now = s.fsm.Clock()
	}
	e := &fsmpb.Entry{
		Version:  fsm.EntryVersion,
		NowMs:    now,
		Seed:     rand.Uint64(),
		Commands: make([]*fsmpb.Command, len(b.reqs)),
	}
	for i, p := range b.reqs {
		e.Commands[i] = p.cmd
	}
	data, err := fsm.EncodeEntry(e)
	if err != nil {
		b.future = errFuture{fmt.Errorf("shard: encode entry: %w", err)}
		return
	}
	s.stats.entries.Add(1)
	s.stats.commands.Add(uint64(len(b.reqs)))
	b.future = s.raft.Apply(data, 0)
}

// runCompleter resolves entries in log order and frees their slots.
func (s *Shard) runCompleter(inflight <-chan *batch, sem <-chan struct{}) {
	defer s.wg.Done()
	for b := range inflight {
		s.complete(b)
		<-sem
	}
}

func (s *Shard) complete(b *batch) {
	// raft never answers futures still sitting in its apply channel when it
	// shuts down, so do not wait on them past shutdown.
	resolved := make(chan error, 1)
	go func() { resolved <- b.future.Error() }()
	var err error
	select {
	case err = <-resolved:
	case <-s.raftDown:
		select {
		case err = <-resolved:
		default:
			err = raft.ErrRaftShutdown
		}
	}
	if errors.Is(err, raft.ErrRaftShutdown) {
		for _, p := range b.reqs {
			p.done <- outcome{err: fmt.Errorf("%w: %w", ErrUnknownResult, ErrShutdown)}
		}
		return
	}
	if _, local := b.future.(errFuture); local {
		// Failed before raft saw it: definitely not applied.
		for _, p := range b.reqs {
			p.done <- outcome{err: err}
		}
		return
	}
	if err != nil {
		err = s.applyError(err)
		for _, p := range b.reqs {
			p.done <- outcome{err: err}
		}
		return
	}
	resp, ok := b.future.Response().(*fsm.Response)
	if !ok || resp == nil || len(resp.Results) != len(b.reqs) {
		err := fmt.Errorf("shard: fsm response %T does not match %d commands", b.future.Response(), len(b.reqs))
		if rerr, isErr := b.future.Response().(error); isErr {
			err = fmt.Errorf("shard: apply: %w", rerr)
		}
		for _, p := range b.reqs {
			p.done <- outcome{err: err}
		}
		return
	}
	for i, p := range b.reqs {
		p.done <- outcome{res: resp.Results[i]}
	}
}

// applyError maps a raft Apply error to the shard's error semantics.
func (s *Shard) applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Rejected before it reached the log (raft's leaderLoop answers a
		// transfer-in-progress apply without dispatching it): definitely
		// not applied, so callers may retry at once elsewhere.
		return s.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrAbortedByRestore):
		// Appended (or possibly appended) by a leader that then stepped
		// down: a new leader may still commit it (raft-notes trap 8).
		return fmt.Errorf("%w: %w", ErrUnknownResult, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w: %w", ErrUnknownResult, ErrShutdown, err)
	default:
		return fmt.Errorf("%w: %w", ErrUnknownResult, err)
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
		case p := <-s.propCh:
			fail(p)
		default:
			return
		}
	}
}

// errFuture is an ApplyFuture that failed before reaching raft.
type errFuture struct{ err error }

func (f errFuture) Error() error          { return f.err }
func (f errFuture) Response() interface{} { return nil }
func (f errFuture) Index() uint64         { return 0 }
