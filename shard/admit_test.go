package shard

import (
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// admitShard is just enough of a Shard for the proposer's admission.
func admitShard() *Shard {
	return &Shard{
		sends:   newSendQueue(),
		fastCh:  make(chan *proposal, 4),
		closing: make(chan struct{}),
	}
}

type admitted struct {
	p        *proposal
	fastOnly bool
	ok       bool
}

func admitAsync(s *Shard, win *window, pending *proposal) <-chan admitted {
	out := make(chan admitted, 1)
	go func() {
		p, fast, ok := s.admit(win, pending)
		out <- admitted{p, fast, ok}
	}()
	return out
}

func sendProposal() *proposal {
	return &proposal{cmd: &fsmpb.Command{Cmd: &fsmpb.Command_Enqueue{Enqueue: &fsmpb.Enqueue{Queue: "q"}}}}
}

func mustPush(t *testing.T, s *Shard, p *proposal) {
	t.Helper()
	if err := s.sends.push(p, "q", 1, maxQueuedSendBytes, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func ackProposal() *proposal {
	return &proposal{cmd: &fsmpb.Command{Cmd: &fsmpb.Command_Ack{Ack: &fsmpb.Ack{}}}}
}

func mustAdmit(t *testing.T, ch <-chan admitted) admitted {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("admit did not return")
		return admitted{}
	}
}

func mustWait(t *testing.T, ch <-chan admitted) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("admit returned %+v while the window had no room for it", a)
	case <-time.After(50 * time.Millisecond):
	}
}

// wantAdmitted checks that admit handed back p, in a fast-only round or not.
func wantAdmitted(t *testing.T, a admitted, p *proposal, fastOnly bool) {
	t.Helper()
	if !a.ok || a.p != p || a.fastOnly != fastOnly {
		t.Fatalf("admit = %+v, want proposal %p with fastOnly=%v", a, p, fastOnly)
	}
}

// fullWindow is a window whose send rounds are all in flight.
func fullWindow(t *testing.T) *window {
	t.Helper()
	win := newWindow()
	for range maxInFlightRounds {
		if !win.tryAcquire(maxInFlightRounds, true) {
			t.Fatal("fresh window refused a round")
		}
	}
	return win
}

func TestAdmitFastRoundPassesFullWindowOfSends(t *testing.T) {
	s := admitShard()
	win := fullWindow(t)
	ack := ackProposal()
	s.fastCh <- ack
	wantAdmitted(t, mustAdmit(t, admitAsync(s, win, nil)), ack, true)
	// The reserved slot is now taken: the next fast command waits for a
	// round to finish, and then takes the slot it freed, still above the
	// send rounds' limit, so again as a fast-only round.
	ack2 := ackProposal()
	s.fastCh <- ack2
	ch := admitAsync(s, win, nil)
	mustWait(t, ch)
	win.release(0, true)
	wantAdmitted(t, mustAdmit(t, ch), ack2, true)
}

func TestAdmitSendWaitsForFullWindow(t *testing.T) {
	s := admitShard()
	win := fullWindow(t)
	send := sendProposal()
	mustPush(t, s, send)
	ch := admitAsync(s, win, nil)
	mustWait(t, ch)
	win.release(0, true)
	wantAdmitted(t, mustAdmit(t, ch), send, false)
}

func TestAdmitFastRoundIgnoresByteLimit(t *testing.T) {
	s := admitShard()
	win := newWindow()
	if !win.tryAcquire(maxInFlightRounds, true) {
		t.Fatal("fresh window refused a round")
	}
	win.add(maxInFlightBytes) // one huge round of sends
	send := sendProposal()
	mustPush(t, s, send)
	ch := admitAsync(s, win, nil)
	mustWait(t, ch)
	ack := ackProposal()
	s.fastCh <- ack
	wantAdmitted(t, mustAdmit(t, ch), ack, true)
}

func TestAdmitPendingAndClose(t *testing.T) {
	s := admitShard()
	win := fullWindow(t)
	hold := ackProposal()
	hold.holdClock = true
	wantAdmitted(t, mustAdmit(t, admitAsync(s, win, hold)), hold, true)
	// Every slot taken, one fast command picked up: closing hands it back.
	ack := ackProposal()
	s.fastCh <- ack
	ch := admitAsync(s, win, nil)
	mustWait(t, ch)
	close(s.closing)
	a := mustAdmit(t, ch)
	if a.ok || a.p != ack {
		t.Fatalf("admit on close = %+v, want !ok with the picked-up ack to fail", a)
	}
}
