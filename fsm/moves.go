package fsm

import "sort"

// Move names one way a message moved, as Options.Moves reports it. The
// names are the metric label values of raftq_queue_transitions_total and
// raftq_messages_total (docs/metrics.md), and the keys of the moves in
// queue stats (api/raftqv1/raftq.proto QueueStatsResponse.moves); MoveSent
// and MoveReceived are in the stats only: the metrics count sends and
// receives by API call.
const (
	MoveSent              = "sent"                    // a message was enqueued (a deduplicated send enqueues nothing)
	MoveReceived          = "received"                // a lease was granted
	MoveLeaseExpired      = "lease_expired"           // a lease's deadline passed (or was set to now by a zero extend)
	MoveNacked            = "nacked"                  // a live lease was nacked
	MoveSnoozed           = "snoozed"                 // a live lease was snoozed
	MoveDeadLettered      = "dead_lettered"           // sent to the DLQ (or dropped with dlq_disabled) after its last receive
	MoveDeadLetteredByCli = "dead_lettered_by_client" // a consumer dead-lettered its lease
	MoveRedriven          = "redriven"                // back from the DLQ
	MoveExpired           = "expired"                 // ready or delayed past the queue's retention_ms
	MoveDeadExpired       = "dead_expired"            // dead past the queue's dead_retention_ms
	MoveAcked             = "acked"                   // a live lease was acked (repeats not counted)
	MoveExtended          = "extended"                // a live lease was extended
)

// MoveCount is how many messages of Queue made the move Event in one
// applied batch.
type MoveCount struct {
	Queue, Event string
	N            uint64
}

type moveKey struct{ queue, event string }

// moved records a move for Options.Moves. It only writes to a map that no
// replicated decision reads, and is a no-op outside ApplyBatch (Restore),
// so reporting cannot make replicas differ.
func (s *state) moved(queue, event string) {
	if s.moves != nil {
		s.moves[moveKey{queue, event}]++
	}
}

func sortedMoves(m map[moveKey]uint64) []MoveCount {
	out := make([]MoveCount, 0, len(m))
	for k, n := range m {
		out = append(out, MoveCount{Queue: k.queue, Event: k.event, N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Queue != out[j].Queue {
			return out[i].Queue < out[j].Queue
		}
		return out[i].Event < out[j].Event
	})
	return out
}
