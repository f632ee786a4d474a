package client

import (
	"strings"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// QueueOptions is a queue's policy. Zero fields take the server's defaults
// (visibility 30 s, max receives 10, backoff 1 s..5 min, dedup window 5 min,
// retention 4 days, no delay, 256 KiB messages, no capacity limit).
type QueueOptions struct {
	FIFO               bool
	Visibility         time.Duration
	MaxReceives        uint32
	BackoffBase        time.Duration
	BackoffMax         time.Duration
	DedupWindow        time.Duration
	Retention          time.Duration
	Delay              time.Duration
	MaxMessageBytes    uint32
	CompletedRetention time.Duration
	DisableDLQ         bool
	// DeadRetention: dead messages older than this are discarded and
	// counted (QueueStats.DeadExpired); 0 keeps them. At most 365 days.
	DeadRetention time.Duration
	// MaxMessagesPerShard and MaxBytesPerShard bound the live (ready,
	// delayed, leased) messages and their body bytes that each shard holds
	// for this queue; a send past either fails with ErrExhausted. A queue
	// spread over N shards holds at most N times as much. 0 = no limit.
	MaxMessagesPerShard uint64
	MaxBytesPerShard    uint64
	// CompletedMaxBytesPerShard bounds the ack results (AckWithResult)
	// the queue's acked records hold on each shard; past it the records
	// acked earliest are dropped first, counted in QueueStats. 0 = 64 MiB;
	// otherwise at least MaxResultBytes.
	CompletedMaxBytesPerShard uint64
	// Quotas cap the whole queue over every shard (docs/tenancy.md);
	// MaxQueues and MaxMessageBytes are a tenant's only.
	Quotas Quotas

	// Fan-out (docs/topics.md); CreateTopic and Subscribe set these.
	// Topic: the queue is a topic: a send to it publishes to its
	// subscriptions and nothing receives from it.
	Topic bool
	// TopicRetention (topics): how long a published message is kept for
	// subscriptions created later to replay; 0 = not kept.
	TopicRetention time.Duration
	// SubscriptionOf: the queue is a subscription of this topic.
	SubscriptionOf string
	// Filter (subscriptions): which publications it receives; "" = all.
	Filter string
	// ReplayFrom (subscriptions, at creation): also receive the topic's
	// retained messages published at or after this time; ReplayEarliest
	// for all of them; zero for none.
	ReplayFrom time.Time
}

func (o QueueOptions) policy() *raftqv1.QueuePolicy {
	mode := raftqv1.QueueMode_QUEUE_MODE_STANDARD
	if o.FIFO {
		mode = raftqv1.QueueMode_QUEUE_MODE_FIFO
	}
	return &raftqv1.QueuePolicy{
		Mode:                 mode,
		VisibilityTimeoutMs:  o.Visibility.Milliseconds(),
		MaxReceiveCount:      o.MaxReceives,
		BackoffBaseMs:        o.BackoffBase.Milliseconds(),
		BackoffMaxMs:         o.BackoffMax.Milliseconds(),
		DedupWindowMs:        o.DedupWindow.Milliseconds(),
		RetentionMs:          o.Retention.Milliseconds(),
		DelayMs:              o.Delay.Milliseconds(),
		MaxMessageBytes:      o.MaxMessageBytes,
		CompletedRetentionMs: o.CompletedRetention.Milliseconds(),
		DlqDisabled:          o.DisableDLQ,
		MaxMessagesPerShard:  o.MaxMessagesPerShard,
		MaxBytesPerShard:     o.MaxBytesPerShard,
		Quotas:               o.Quotas.proto(),

		CompletedMaxBytesPerShard: o.CompletedMaxBytesPerShard,
		DeadRetentionMs:           o.DeadRetention.Milliseconds(),

		Topic:            o.Topic,
		TopicRetentionMs: o.TopicRetention.Milliseconds(),
		SubscriptionOf:   o.SubscriptionOf,
		Filter:           o.Filter,
		ReplayFromMs:     replayMs(o.ReplayFrom),
	}
}

// replayMs is ReplayFrom on the wire: 0 for the zero time, and at least 1
// otherwise (0 means "no replay" there).
func replayMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixMilli(), 1)
}

func optionsFrom(p *raftqv1.QueuePolicy) QueueOptions {
	return QueueOptions{
		FIFO:                p.GetMode() == raftqv1.QueueMode_QUEUE_MODE_FIFO,
		Visibility:          ms(p.GetVisibilityTimeoutMs()),
		MaxReceives:         p.GetMaxReceiveCount(),
		BackoffBase:         ms(p.GetBackoffBaseMs()),
		BackoffMax:          ms(p.GetBackoffMaxMs()),
		DedupWindow:         ms(p.GetDedupWindowMs()),
		Retention:           ms(p.GetRetentionMs()),
		Delay:               ms(p.GetDelayMs()),
		MaxMessageBytes:     p.GetMaxMessageBytes(),
		CompletedRetention:  ms(p.GetCompletedRetentionMs()),
		DisableDLQ:          p.GetDlqDisabled(),
		MaxMessagesPerShard: p.GetMaxMessagesPerShard(),
		MaxBytesPerShard:    p.GetMaxBytesPerShard(),
		Quotas:              quotasFrom(p.GetQuotas()),

		CompletedMaxBytesPerShard: p.GetCompletedMaxBytesPerShard(),
		DeadRetention:             ms(p.GetDeadRetentionMs()),

		Topic:          p.GetTopic(),
		TopicRetention: ms(p.GetTopicRetentionMs()),
		SubscriptionOf: p.GetSubscriptionOf(),
		Filter:         p.GetFilter(),
		ReplayFrom:     unixMs(p.GetReplayFromMs()),
	}
}

// QueueInfo describes a queue.
type QueueInfo struct {
	Name    string
	Options QueueOptions
	Created time.Time
	Paused  bool // PauseQueue: receives return nothing until ResumeQueue
}

func queueInfoFrom(q *raftqv1.QueueInfo) QueueInfo {
	return QueueInfo{Name: q.GetName(), Options: optionsFrom(q.GetPolicy()), Created: unixMs(q.GetCreatedMs()), Paused: q.GetPaused()}
}

// QueueStats counts a queue's messages over all shards.
type QueueStats struct {
	Name          string
	Ready         uint64
	Delayed       uint64
	InFlight      uint64
	Dead          uint64
	DeadExpired   uint64        // dead messages discarded after the dead retention
	OldestReady   time.Duration // age of the oldest ready message
	BlockedGroups uint64        // FIFO groups with a message in flight
	LiveBytes     uint64        // bodies of ready, delayed and leased messages
	Tenant        string        // "" for a queue of no tenant
	Quotas        Quotas        // the queue's own
	TenantQuotas  Quotas        // its tenant's
	// Acked records kept for GetMessage and Wait, their results' bytes,
	// and those dropped early by CompletedMaxBytesPerShard.
	Completed, CompletedBytes, CompletedEvicted uint64
	// Retained: a topic's publications kept for subscriptions created
	// later to replay (TopicOptions.Retention); a topic has no Ready.
	Retained uint64
	Paused   bool // PauseQueue: receives return nothing
	// Moves counts how many messages made each move, by event ("sent",
	// "received", "acked", "nacked", "snoozed", "extended",
	// "lease_expired", "dead_lettered", "dead_lettered_by_client",
	// "redriven", "expired", "dead_expired"), as each shard's current
	// leader counted them since it took the lead, summed over the shards.
	// For rates, not accounting: a figure may go down when a shard's
	// leader changes or restarts (read that as a reset), and an event
	// nothing made yet may be absent. Nil from a server without them.
	Moves map[string]uint64
}

// Message is a received message with its lease.
type Message struct {
	ID      string
	Receipt string // opaque; pass to Ack, Nack, Extend, DeadLetter
	// LeaseEpoch grows with every lease of the shard: use it as a fencing
	// token on writes the handler makes elsewhere.
	LeaseEpoch    uint64
	Body          []byte
	Attributes    map[string]string
	Type          string
	Group         string
	Priority      uint32
	ReceiveCount  uint32
	EnqueuedAt    time.Time
	LeaseDeadline time.Time // by the shard leader's clock
	LastError     string
}

func messageFrom(m *raftqv1.ReceivedMessage) *Message {
	return &Message{
		ID:            m.GetMessageId(),
		Receipt:       m.GetReceipt(),
		LeaseEpoch:    m.GetLeaseEpoch(),
		Body:          m.GetBody(),
		Attributes:    m.GetAttributes(),
		Type:          m.GetType(),
		Group:         m.GetGroupId(),
		Priority:      m.GetPriority(),
		ReceiveCount:  m.GetReceiveCount(),
		EnqueuedAt:    unixMs(m.GetEnqueuedMs()),
		LeaseDeadline: unixMs(m.GetLeaseDeadlineMs()),
		LastError:     m.GetLastError(),
	}
}

// Attempt is one delivery in a message's history.
type Attempt struct {
	LeaseEpoch uint64
	Received   time.Time
	Ended      time.Time
	Outcome    string // expired, nacked, snoozed, poison, max_receives, redriven, acked
	Error      string
	Consumer   string
}

// MessageInfo is the full record of a message, as GetMessage and ListDead
// return it.
type MessageInfo struct {
	ID            string
	Queue         string
	State         string // delayed, ready, leased, acked, dead
	Body          []byte
	Attributes    map[string]string
	Type          string
	Group         string
	DedupKey      string
	Priority      uint32
	EnqueuedAt    time.Time
	AvailableAt   time.Time
	ReceiveCount  uint32
	LastError     string
	LeaseEpoch    uint64
	LeaseDeadline time.Time
	DeadReason    string
	StateChanged  time.Time
	History       []Attempt
	Result        []byte // acked: the result its ack carried (AckWithResult)
	// The message's own retry policy (MaxReceives, Backoff); zero: the
	// queue's.
	MaxReceives uint32
	BackoffBase time.Duration
	BackoffMax  time.Duration
}

func messageInfoFrom(mi *raftqv1.MessageInfo) *MessageInfo {
	m := mi.GetMessage()
	out := &MessageInfo{
		ID:            mi.GetMessageId(),
		Queue:         m.GetQueue(),
		State:         enumName(m.GetState().String(), "STATE_"),
		Body:          m.GetBody(),
		Attributes:    m.GetAttributes(),
		Type:          m.GetType(),
		Group:         m.GetGroupId(),
		DedupKey:      m.GetDedupKey(),
		Priority:      m.GetPriority(),
		EnqueuedAt:    unixMs(m.GetEnqueuedMs()),
		AvailableAt:   unixMs(m.GetAvailableMs()),
		ReceiveCount:  m.GetReceiveCount(),
		LastError:     m.GetLastError(),
		LeaseEpoch:    m.GetLeaseEpoch(),
		LeaseDeadline: unixMs(m.GetLeaseDeadlineMs()),
		StateChanged:  unixMs(m.GetStateChangedMs()),
		Result:        m.GetResult(),
		MaxReceives:   m.GetMaxReceiveCount(),
		BackoffBase:   ms(m.GetBackoffBaseMs()),
		BackoffMax:    ms(m.GetBackoffMaxMs()),
	}
	if m.GetDeadReason() != raftqv1.Reason_REASON_UNSPECIFIED {
		out.DeadReason = enumName(m.GetDeadReason().String(), "REASON_")
	}
	for _, a := range m.GetHistory() {
		out.History = append(out.History, Attempt{
			LeaseEpoch: a.GetLeaseEpoch(),
			Received:   unixMs(a.GetReceivedMs()),
			Ended:      unixMs(a.GetEndedMs()),
			Outcome:    enumName(a.GetOutcome().String(), "REASON_"),
			Error:      a.GetError(),
			Consumer:   a.GetConsumer(),
		})
	}
	return out
}

// enumName turns "STATE_READY" into "ready".
func enumName(s, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s, prefix))
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// unixMs converts Unix milliseconds; 0 stays the zero time.
func unixMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}
