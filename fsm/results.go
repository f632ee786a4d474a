package fsm

import (
	"fmt"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Job results (docs/jobs.md, "Job results and status"). An ack may carry a
// result, kept on the acked record until the queue's completed retention
// runs out. The results of a queue's completed records on one shard are
// bounded by completed_max_bytes_per_shard: past it the records acked
// earliest are dropped first, and counted per queue (queue.evicted), so a
// busy queue with large results cannot fill a node's memory in the hour a
// record is kept. Records without a result hold no bytes here; they are
// bounded by MaxCompletedRecords like every acked record.

const (
	// MaxResultBytes caps one ack result.
	MaxResultBytes = 64 << 10
	// DefaultCompletedMaxBytesPerShard is a queue's result byte bound per
	// shard when its policy leaves completed_max_bytes_per_shard at 0.
	DefaultCompletedMaxBytesPerShard = 64 << 20
	// MaxResultBytesPerShard bounds the results one shard keeps over all
	// its queues, on every replica and in every snapshot: past it the
	// records acked earliest are dropped first, whatever their queue, and
	// counted as their queue's evictions.
	MaxResultBytesPerShard = 256 << 20
)

// usesResults reports whether an ack needs log format 7: a replica of
// format 6 would drop the results, and its records would part from the
// leader's. Any results at all, even empty ones: this binary checks their
// count against the receipts and may refuse the ack, where format 6 would
// apply it.
func usesResults(a *fsmpb.Ack) bool {
	return len(a.GetResults()) > 0
}

// usesResultBound reports whether a policy needs log format 7: a replica
// of format 6 would ignore the byte bound and keep records the leader
// drops.
func usesResultBound(p *fsmpb.QueuePolicy) bool {
	return p.GetCompletedMaxBytesPerShard() != 0
}

// completedMaxBytes is the queue's result byte bound on this shard.
func completedMaxBytes(p *fsmpb.QueuePolicy) uint64 {
	if n := p.GetCompletedMaxBytesPerShard(); n != 0 {
		return n
	}
	return DefaultCompletedMaxBytesPerShard
}

// validateResultBound checks completed_max_bytes_per_shard: a bound below
// one largest result would drop that result as soon as it was kept.
func validateResultBound(p *fsmpb.QueuePolicy) error {
	n := p.GetCompletedMaxBytesPerShard()
	if n != 0 && (n < MaxResultBytes || n > MaxBytesPerShardLimit) {
		return fmt.Errorf("%w: completed_max_bytes_per_shard is %d, allowed 0 (default %d) or %d..%d",
			ErrInvalidArgument, n, DefaultCompletedMaxBytesPerShard, MaxResultBytes, uint64(MaxBytesPerShardLimit))
	}
	return nil
}

// validateAckResults checks an ack's results against its receipts: none,
// or one per receipt, each within MaxResultBytes.
func validateAckResults(c *fsmpb.Ack) *fsmpb.Result {
	rs := c.GetResults()
	if len(rs) != 0 && len(rs) != len(c.GetReceipts()) {
		return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "%d results for %d receipts: give none or one per receipt", len(rs), len(c.GetReceipts()))
	}
	for i, r := range rs {
		if len(r) > MaxResultBytes {
			return failed(fsmpb.Code_CODE_INVALID_ARGUMENT, "result %d is %d bytes, limit %d", i, len(r), MaxResultBytes)
		}
	}
	return nil
}

// ackResult is the result for receipt i of an ack, nil when it has none.
func ackResult(c *fsmpb.Ack, i int) []byte {
	if rs := c.GetResults(); i < len(rs) && len(rs[i]) > 0 {
		return rs[i]
	}
	return nil
}

// attachResult and detachResult keep the queue's and the shard's result
// indexes and byte sums in step with the acked records that hold a result
// (transitions.go).
func (s *state) attachResult(m *msg) {
	if len(m.result) == 0 {
		return
	}
	it := timeItem{m.stateChangedMs, m.id}
	m.q.results.ReplaceOrInsert(it)
	m.q.resultBytes += uint64(len(m.result))
	s.results.ReplaceOrInsert(it)
	s.resultBytes += uint64(len(m.result))
}

func (s *state) detachResult(m *msg) {
	if len(m.result) == 0 {
		return
	}
	it := timeItem{m.stateChangedMs, m.id}
	m.q.results.Delete(it)
	m.q.resultBytes -= uint64(len(m.result))
	s.results.Delete(it)
	s.resultBytes -= uint64(len(m.result))
}

// evictResults drops the queue's earliest acked records with results until
// their bytes are within the queue's bound, then the shard's earliest
// until all its results are within resultCap, counting each as its
// queue's eviction.
func (s *state) evictResults(q *queue) {
	limit := completedMaxBytes(q.policy)
	for q.resultBytes > limit {
		it, ok := q.results.Min()
		if !ok {
			return
		}
		m, _ := s.get(it.id)
		s.remove(m)
		q.evicted++
	}
	for s.resultBytes > s.resultCap {
		it, ok := s.results.Min()
		if !ok {
			return
		}
		m, _ := s.get(it.id)
		m.q.evicted++
		s.remove(m)
	}
}
