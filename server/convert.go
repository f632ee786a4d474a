package server

import (
	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/peer/peerpb"
)

// The public API (api/raftqv1) and the replicated log (fsm/fsmpb) each own
// their types, so either can change without the other; this file is the
// only place that turns one into the other. The enums share their numbers
// (api/raftqv1/raftq.proto), and convert_test.go fails when a field is
// added to one side and not here.

// policyToFSM is a client's queue policy in the log's form; nil stays nil.
func policyToFSM(p *raftqv1.QueuePolicy) *fsmpb.QueuePolicy {
	if p == nil {
		return nil
	}
	return &fsmpb.QueuePolicy{
		Mode:                 fsmpb.QueueMode(p.GetMode()),
		VisibilityTimeoutMs:  p.GetVisibilityTimeoutMs(),
		MaxReceiveCount:      p.GetMaxReceiveCount(),
		BackoffBaseMs:        p.GetBackoffBaseMs(),
		BackoffMaxMs:         p.GetBackoffMaxMs(),
		DedupWindowMs:        p.GetDedupWindowMs(),
		RetentionMs:          p.GetRetentionMs(),
		DelayMs:              p.GetDelayMs(),
		MaxMessageBytes:      p.GetMaxMessageBytes(),
		CompletedRetentionMs: p.GetCompletedRetentionMs(),
		DlqDisabled:          p.GetDlqDisabled(),
		MaxMessagesPerShard:  p.GetMaxMessagesPerShard(),
		MaxBytesPerShard:     p.GetMaxBytesPerShard(),
		Quotas:               quotasToFSM(p.GetQuotas()),

		CompletedMaxBytesPerShard: p.GetCompletedMaxBytesPerShard(),
		DeadRetentionMs:           p.GetDeadRetentionMs(),

		Topic:            p.GetTopic(),
		TopicRetentionMs: p.GetTopicRetentionMs(),
		SubscriptionOf:   p.GetSubscriptionOf(),
		Filter:           p.GetFilter(),
		ReplayFromMs:     p.GetReplayFromMs(),
	}
}

// quotasToFSM is a quota set in the replicated form; nil stays nil.
func quotasToFSM(q *raftqv1.Quotas) *fsmpb.Quotas {
	if q == nil {
		return nil
	}
	return &fsmpb.Quotas{
		SendRate: q.GetSendRate(), SendBurst: q.GetSendBurst(),
		MaxMessages: q.GetMaxMessages(), MaxBytes: q.GetMaxBytes(), MaxInFlight: q.GetMaxInFlight(),
		MaxQueues: q.GetMaxQueues(), MaxMessageBytes: q.GetMaxMessageBytes(), Weight: q.GetWeight(),
	}
}

// quotasFromFSM is a replicated quota set in the public form; nil stays
// nil.
func quotasFromFSM(q *fsmpb.Quotas) *raftqv1.Quotas {
	if q == nil {
		return nil
	}
	return &raftqv1.Quotas{
		SendRate: q.GetSendRate(), SendBurst: q.GetSendBurst(),
		MaxMessages: q.GetMaxMessages(), MaxBytes: q.GetMaxBytes(), MaxInFlight: q.GetMaxInFlight(),
		MaxQueues: q.GetMaxQueues(), MaxMessageBytes: q.GetMaxMessageBytes(), Weight: q.GetWeight(),
	}
}

// policyFromFSM is a replicated queue policy in the public form; nil stays
// nil.
func policyFromFSM(p *fsmpb.QueuePolicy) *raftqv1.QueuePolicy {
	if p == nil {
		return nil
	}
	return &raftqv1.QueuePolicy{
		Mode:                 raftqv1.QueueMode(p.GetMode()),
		VisibilityTimeoutMs:  p.GetVisibilityTimeoutMs(),
		MaxReceiveCount:      p.GetMaxReceiveCount(),
		BackoffBaseMs:        p.GetBackoffBaseMs(),
		BackoffMaxMs:         p.GetBackoffMaxMs(),
		DedupWindowMs:        p.GetDedupWindowMs(),
		RetentionMs:          p.GetRetentionMs(),
		DelayMs:              p.GetDelayMs(),
		MaxMessageBytes:      p.GetMaxMessageBytes(),
		CompletedRetentionMs: p.GetCompletedRetentionMs(),
		DlqDisabled:          p.GetDlqDisabled(),
		MaxMessagesPerShard:  p.GetMaxMessagesPerShard(),
		MaxBytesPerShard:     p.GetMaxBytesPerShard(),
		Quotas:               quotasFromFSM(p.GetQuotas()),

		CompletedMaxBytesPerShard: p.GetCompletedMaxBytesPerShard(),
		DeadRetentionMs:           p.GetDeadRetentionMs(),

		Topic:            p.GetTopic(),
		TopicRetentionMs: p.GetTopicRetentionMs(),
		SubscriptionOf:   p.GetSubscriptionOf(),
		Filter:           p.GetFilter(),
		ReplayFromMs:     p.GetReplayFromMs(),
	}
}

// queueInfo is a queue of the meta group as the API describes it.
func queueInfo(q meta.Queue) *raftqv1.QueueInfo {
	return &raftqv1.QueueInfo{Name: q.Name, Policy: policyFromFSM(q.Policy), CreatedMs: q.CreatedMs, Paused: q.Paused}
}

// messageFromFSM is a replicated message record in the public form; nil
// stays nil. It shares the record's body and attributes, which neither side
// changes afterwards.
func messageFromFSM(m *fsmpb.Message) *raftqv1.Message {
	if m == nil {
		return nil
	}
	out := &raftqv1.Message{
		Id:              m.GetId(),
		Queue:           m.GetQueue(),
		Body:            m.GetBody(),
		Attributes:      m.GetAttributes(),
		Type:            m.GetType(),
		GroupId:         m.GetGroupId(),
		DedupKey:        m.GetDedupKey(),
		UniqueUntilDone: m.GetUniqueUntilDone(),
		Priority:        m.GetPriority(),
		Seq:             m.GetSeq(),
		EnqueuedMs:      m.GetEnqueuedMs(),
		AvailableMs:     m.GetAvailableMs(),
		ReceiveCount:    m.GetReceiveCount(),
		FirstReceivedMs: m.GetFirstReceivedMs(),
		LastReceivedMs:  m.GetLastReceivedMs(),
		LastError:       m.GetLastError(),
		State:           raftqv1.State(m.GetState()),
		LeaseEpoch:      m.GetLeaseEpoch(),
		LeaseDeadlineMs: m.GetLeaseDeadlineMs(),
		LeaseTerm:       m.GetLeaseTerm(),
		DeadReason:      raftqv1.Reason(m.GetDeadReason()),
		StateChangedMs:  m.GetStateChangedMs(),
		ExpireMs:        m.GetExpireMs(),
		Result:          m.GetResult(),
		MaxReceiveCount: m.GetMaxReceiveCount(),
		BackoffBaseMs:   m.GetBackoffBaseMs(),
		BackoffMaxMs:    m.GetBackoffMaxMs(),
		PublishedAs:     m.GetPublishedAs(),
	}
	if h := m.GetHistory(); len(h) > 0 {
		out.History = make([]*raftqv1.Attempt, len(h))
		for i, a := range h {
			out.History[i] = attemptFromFSM(a)
		}
	}
	return out
}

func attemptFromFSM(a *fsmpb.Attempt) *raftqv1.Attempt {
	return &raftqv1.Attempt{
		LeaseEpoch: a.GetLeaseEpoch(),
		ReceivedMs: a.GetReceivedMs(),
		EndedMs:    a.GetEndedMs(),
		Outcome:    raftqv1.Reason(a.GetOutcome()),
		Error:      a.GetError(),
		Consumer:   a.GetConsumer(),
	}
}

// addShardStats adds one shard's stats of a queue (its leader's answer) to
// the queue's: counts and moves are summed over the shards, the oldest
// ready age is the oldest of any. convert_test.go fails when a field of
// the shard's stats is not carried here.
func addShardStats(out *raftqv1.QueueStatsResponse, st *peerpb.QueueStats) {
	out.Ready += st.GetReady()
	out.Delayed += st.GetDelayed()
	out.InFlight += st.GetInFlight()
	out.Dead += st.GetDead()
	out.DeadExpired += st.GetDeadExpired()
	out.BlockedGroups += st.GetBlockedGroups()
	out.LiveBytes += st.GetLiveBytes()
	out.Completed += st.GetCompleted()
	out.CompletedBytes += st.GetCompletedBytes()
	out.CompletedEvicted += st.GetCompletedEvicted()
	out.OldestReadyAgeMs = max(out.OldestReadyAgeMs, st.GetOldestReadyAgeMs())
	for ev, n := range st.GetMoves() {
		if out.Moves == nil {
			out.Moves = make(map[string]uint64)
		}
		out.Moves[ev] += n
	}
}
