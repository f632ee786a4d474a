package shard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/raftgroup"
)

const (
	// maxTickSleep caps the timer so a missed wake-up costs at most this.
	maxTickSleep = time.Second
	// minTickGap bounds the Tick rate even if NextDue stays in the past
	// (e.g. due work the FSM cannot process yet): never a busy loop.
	minTickGap = 20 * time.Millisecond
	// dutyRetry spaces retries of a failed barrier or grace proposal.
	dutyRetry = 100 * time.Millisecond
)

// watchLeadership drains raft's NotifyCh. raft's main loop blocks until the
// channel is read, so this only stores and kicks; manageLeadership does the
// work.
func (s *Shard) watchLeadership() {
	defer s.wg.Done()
	for {
		select {
		case v := <-s.notifyCh:
			s.wantLeader.Store(v)
			kick(s.leaderKick)
		case <-s.closing:
			return
		}
	}
}

// manageLeadership starts and stops leader duties as leadership comes and
// goes. Notifications coalesce, so a lost-and-regained leadership between
// two looks is caught by comparing terms.
func (s *Shard) manageLeadership() {
	defer s.wg.Done()
	cur := notLeaderState
	var stop func()
	end := func() {
		if !cur.leader {
			return
		}
		s.lead.Store(notLeaderState)
		close(cur.lost)
		stop()
		cur = notLeaderState
		s.publish(false)
		s.wakeAll() // waits wake and learn they lost leadership
	}
	for {
		select {
		case <-s.leaderKick:
		case <-s.closing:
			end()
			return
		}
		// A sidelined replica ends its duties even while raft still names
		// it leader (it may be stuck, or transferring leadership away).
		want := s.wantLeader.Load() && !s.sidelined.Load()
		term := s.raft.CurrentTerm()
		if cur.leader && (!want || term != cur.term) {
			end()
		}
		if want && !cur.leader {
			st := &leaderState{leader: true, term: term, ready: make(chan struct{}), lost: make(chan struct{})}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.leaderDuties(ctx, st)
			}()
			stop = func() { cancel(); <-done }
			cur = st
			s.lead.Store(st)
		}
	}
}

// leaderDuties: barrier (apply everything earlier terms committed), then the
// lease grace for this term, then open for proposals and run the tick timer.
func (s *Shard) leaderDuties(ctx context.Context, st *leaderState) {
	for {
		err := raftgroup.WaitFuture(ctx, s.raft.Barrier(s.cfg.Raft.ElectionTimeout*10), s.raftDown)
		if err == nil {
			break
		}
		level := slog.LevelWarn
		if errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) || ctx.Err() != nil {
			// Another replica leads now (an election, or peers stopping
			// together), or this term's duties were called off (the node
			// stopping, leadership gone): nothing is wrong here.
			level = slog.LevelInfo
		}
		s.logger.Log(ctx, level, "leader barrier failed", "term", st.term, "err", err)
		if !sleepCtx(ctx, dutyRetry) {
			return
		}
	}
	grace := &fsmpb.Command{Cmd: &fsmpb.Command_LeaderGrace{LeaderGrace: &fsmpb.LeaderGrace{
		Term: st.term, GraceMs: s.cfg.LeaseGrace.Milliseconds(),
		BaseMs: s.cfg.Now().UnixMilli(), SkewMs: (2 * s.cfg.MaxClockOffset).Milliseconds(),
	}}}
	for {
		_, err := s.proposeReq(ctx, &proposal{cmd: grace, holdClock: true})
		if err == nil {
			break
		}
		// An unknown result is retried too: LeaderGrace applies once per
		// term, so a duplicate is a no-op. Losing the leadership (an
		// election, or peers stopping together) or stopping ends these
		// duties with nothing wrong, as for the barrier above.
		ended := errors.Is(err, raftgroup.ErrNotLeader) || errors.Is(err, ErrShutdown)
		level := slog.LevelWarn
		if ended {
			level = slog.LevelInfo
		}
		s.logger.Log(ctx, level, "leader grace proposal failed", "term", st.term, "err", err)
		if ended || !sleepCtx(ctx, dutyRetry) {
			return
		}
	}
	close(st.ready)
	s.logger.Info("shard leader ready", "term", st.term)
	s.publish(true)
	s.runTicks(ctx)
}

// runTicks proposes Tick when the FSM reports due work (delays, lease
// expiries, retention). It sleeps until the next due time or an apply that
// may have moved it, capped at maxTickSleep.
func (s *Shard) runTicks(ctx context.Context) {
	tick := &fsmpb.Command{Cmd: &fsmpb.Command_Tick{Tick: &fsmpb.Tick{}}}
	timer := time.NewTimer(maxTickSleep)
	defer timer.Stop()
	for {
		due, ok := s.fsm.NextDue()
		// The FSM judges due work against max(its clock, our stamp).
		ref := max(s.cfg.Now().UnixMilli(), s.fsm.Clock())
		if ok && due <= ref {
			s.stats.ticks.Add(1)
			if _, err := s.propose(ctx, tick); err != nil && ctx.Err() == nil {
				s.logger.Warn("tick proposal failed", "err", err)
			}
			if !sleepCtx(ctx, minTickGap) {
				return
			}
			continue
		}
		wait := maxTickSleep
		if ok {
			wait = min(wait, time.Duration(due-ref)*time.Millisecond)
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.applyKick:
			if !timer.Stop() {
				<-timer.C
			}
		case <-ctx.Done():
			return
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Subscribe returns a channel of leadership changes: true once this replica
// leads and is ready (after barrier and grace), false when it stops. The
// current value is sent at once. Slow readers see only the latest value
// (the channel holds one); the sender never blocks. Call cancel to stop.
func (s *Shard) Subscribe() (<-chan bool, func()) {
	ch := make(chan bool, 1)
	s.subMu.Lock()
	id := s.nextSub
	s.nextSub++
	s.subs[id] = ch
	ch <- s.ready
	s.subMu.Unlock()
	return ch, func() {
		s.subMu.Lock()
		delete(s.subs, id)
		s.subMu.Unlock()
	}
}

func (s *Shard) publish(v bool) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.ready = v
	for _, ch := range s.subs {
		select {
		case ch <- v:
			continue
		default:
		}
		// Full: replace the stale value with the latest.
		select {
		case <-ch:
		default:
		}
		select {
		case ch <- v:
		default:
		}
	}
}
