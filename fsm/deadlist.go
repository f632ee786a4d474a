package fsm

import (
	"strings"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// MaxDeadScan bounds how many dead records one filtered listing examines
// under the read lock, so a filter that matches little in a large DLQ
// cannot stall the shard's writers; the listing then says where it
// stopped (DeadPage.ScannedTo) and the caller goes on from there.
const MaxDeadScan = 20000

// DeadFilter narrows a dead listing; zero fields match everything.
type DeadFilter struct {
	Type          string // exactly this message type
	ErrorContains string // last error contains this text
	SinceMs       int64  // died at or after
	UntilMs       int64  // died before (0: no bound)
}

func (f DeadFilter) match(m *msg) bool {
	return (f.Type == "" || m.typ == f.Type) && (f.ErrorContains == "" || strings.Contains(m.lastError, f.ErrorContains))
}

// DeadCursor is a position in a queue's dead messages: (death ms, id).
type DeadCursor struct {
	Ms int64
	ID uint64
}

// DeadPage is one filtered listing. ScannedTo is set when the scan budget
// ran out before limit matches were found: the last record examined, so
// nothing after it was looked at.
type DeadPage struct {
	Messages  []*fsmpb.Message
	ScannedTo *DeadCursor
}

// ListDeadFiltered lists up to limit dead messages of queue that f
// matches, in (death ms, id) order from `from` inclusive, examining at most
// MaxDeadScan records.
func (f *FSM) ListDeadFiltered(queue string, from DeadCursor, filter DeadFilter, limit int) DeadPage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var page DeadPage
	q, ok := f.s.queues[queue]
	if !ok || limit <= 0 {
		return page
	}
	start := timeItem{from.Ms, from.ID}
	if filter.SinceMs > start.t {
		start = timeItem{filter.SinceMs, 0}
	}
	scanned := 0
	q.dead.AscendGreaterOrEqual(start, func(it timeItem) bool {
		if filter.UntilMs > 0 && it.t >= filter.UntilMs {
			return false
		}
		scanned++
		m, _ := f.s.get(it.id)
		if filter.match(m) {
			page.Messages = append(page.Messages, m.toProto(true))
		}
		if len(page.Messages) >= limit {
			return false
		}
		if scanned >= MaxDeadScan {
			page.ScannedTo = &DeadCursor{Ms: it.t, ID: it.id}
			return false
		}
		return true
	})
	return page
}
