package fsm

import (
	"slices"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func TestListDeadFiltered(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	h.mustEnqueue("q",
		&fsmpb.NewMessage{Type: "email"}, &fsmpb.NewMessage{Type: "sms"},
		&fsmpb.NewMessage{Type: "email"}, &fsmpb.NewMessage{Type: "email"})
	errs := []string{"smtp timeout", "carrier down", "bad address", "smtp timeout again"}
	var died []int64
	var all []uint64
	for _, e := range errs {
		m := h.mustReceive("q", 1, 1000)[0]
		h.mustOK(deadLetterCmd(receipt(m), e))
		died = append(died, h.now)
		all = append(all, m.GetId())
		h.now += 1000
	}
	list := func(from DeadCursor, f DeadFilter, limit int) []uint64 {
		return ids(h.f.ListDeadFiltered("q", from, f, limit).Messages)
	}
	for name, c := range map[string]struct {
		f    DeadFilter
		want []uint64
	}{
		"none":      {DeadFilter{}, all},
		"type":      {DeadFilter{Type: "email"}, []uint64{all[0], all[2], all[3]}},
		"error":     {DeadFilter{ErrorContains: "smtp"}, []uint64{all[0], all[3]}},
		"both":      {DeadFilter{Type: "email", ErrorContains: "address"}, []uint64{all[2]}},
		"since":     {DeadFilter{SinceMs: died[2]}, all[2:]},
		"until":     {DeadFilter{UntilMs: died[1]}, all[:1]},
		"window":    {DeadFilter{SinceMs: died[1], UntilMs: died[3]}, all[1:3]},
		"no match":  {DeadFilter{Type: "push"}, nil},
		"error+win": {DeadFilter{ErrorContains: "smtp", SinceMs: died[1]}, all[3:]},
	} {
		if got := list(DeadCursor{}, c.f, 100); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", name, got, c.want)
		}
	}
	// Paging with a filter: a page of one, then on after it.
	f := DeadFilter{Type: "email"}
	p1 := h.f.ListDeadFiltered("q", DeadCursor{}, f, 1).Messages
	if len(p1) != 1 || p1[0].GetId() != all[0] {
		t.Fatalf("page 1 %v", ids(p1))
	}
	last := p1[0]
	if got := list(DeadCursor{Ms: last.GetStateChangedMs(), ID: last.GetId() + 1}, f, 10); !slices.Equal(got, []uint64{all[2], all[3]}) {
		t.Fatalf("page 2 %v", got)
	}
}

// A filter that matches little stops at the scan budget and says where.
func TestListDeadScanBudget(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", nil)
	n := MaxDeadScan + 5
	batch := make([]*fsmpb.NewMessage, 0, 1000)
	for i := 0; i < n; i += len(batch) {
		batch = batch[:0]
		for j := i; j < min(n, i+1000); j++ {
			typ := "noise"
			if j == n-1 {
				typ = "needle"
			}
			batch = append(batch, &fsmpb.NewMessage{Type: typ})
		}
		h.mustEnqueue("q", batch...)
	}
	for {
		ms := h.mustReceive("q", 500, 1000)
		if len(ms) == 0 {
			break
		}
		items := make([]*fsmpb.DeadLetterItem, len(ms))
		for i, m := range ms {
			items[i] = &fsmpb.DeadLetterItem{Receipt: receipt(m)}
		}
		h.mustOK(&fsmpb.Command{Cmd: &fsmpb.Command_DeadLetter{DeadLetter: &fsmpb.DeadLetter{Items: items}}})
	}
	p := h.f.ListDeadFiltered("q", DeadCursor{}, DeadFilter{Type: "needle"}, 10)
	if len(p.Messages) != 0 || p.ScannedTo == nil {
		t.Fatalf("first call: %d messages, scanned to %v", len(p.Messages), p.ScannedTo)
	}
	p = h.f.ListDeadFiltered("q", DeadCursor{Ms: p.ScannedTo.Ms, ID: p.ScannedTo.ID + 1}, DeadFilter{Type: "needle"}, 10)
	if len(p.Messages) != 1 || p.Messages[0].GetType() != "needle" || p.ScannedTo != nil {
		t.Fatalf("second call: %v, scanned to %v", ids(p.Messages), p.ScannedTo)
	}
}
