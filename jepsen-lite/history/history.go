// Package history records what jepsen-lite clients asked for and what they
// learned, as Jepsen does: every operation is an invoke followed by exactly
// one completion (ok, fail or info), written as JSON lines. Checkers read
// nothing else, so a history file is a complete, replayable account.
package history

// Op types. fail is reserved for operations that certainly had no effect;
// anything that may have been applied is info.
const (
	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// Functions. Deliveries and acks are separate operations so that a crash
// between them is visible.
const (
	FEnqueue = "enqueue"
	FReceive = "receive"
	FAck     = "ack"
	FNack    = "nack"
	FExtend  = "extend"
	// FFinal carries the server's record of one message after the final
	// recovery phase (GetMessage); FDead one message listed in a DLQ.
	FFinal = "final"
	FDead  = "dead"
	// FNemesis ops are faults, on process NemesisProcess, one at a time:
	// invoke when the fault starts to be applied; then ok once applied
	// (Fault says what was done) or info with Error when applying failed;
	// after an ok, info when undone (Error when the undo failed).
	FNemesis = "nemesis"
	// FPhase marks the run's phases (Fault names the phase): "setup"
	// (info, first op: Setup), "heal" and "drain" (info, when they begin),
	// "replicas" (ok: Shards, the replica comparison) and "final" (ok when
	// the final phase completed, fail with Error when it could not).
	FPhase = "phase"
	// FCron is one message of a cron schedule received by the cron
	// workload (Cron.SlotMs or Cron.Trigger says which); FCronState is a
	// schedule as the meta leader recorded it once firing stopped.
	FCron      = "cron"
	FCronState = "cron-state"
	// FPublish is a send to a topic (the fan-out workload): Queue is the
	// topic, Attrs and MsgType what the filters read; its ok completion
	// carries Copies, how many subscriptions the server says got one.
	FPublish = "publish"
	// FSubscribe creates a topic (Queue = Sub.Topic) or a subscription
	// of Sub.Topic (Queue = its name), one attempt per invoke.
	FSubscribe = "subscribe"
	// FDeadLetter dead-letters a delivery by hand (DeadLetter: reason
	// POISON), as an ack names it by MessageID, Epoch and Receipt.
	FDeadLetter = "deadletter"
)

// Phase names (Op.Fault of FPhase ops).
const (
	PhaseSetup    = "setup"
	PhaseHeal     = "heal"
	PhaseDrain    = "drain"
	PhaseReplicas = "replicas"
	PhaseFinal    = "final"
)

// NemesisProcess is the process number of fault operations.
const NemesisProcess = -1

// Op is one line of the history.
type Op struct {
	Index   int64  `json:"index"`
	Type    string `json:"type"`
	F       string `json:"f"`
	Process int    `json:"process"`
	// Node is the gRPC address the client sent to ("" for nemesis).
	Node string `json:"node,omitempty"`
	// Time is nanoseconds since the run started, from the monotonic clock.
	Time int64 `json:"time"`

	Queue string `json:"queue,omitempty"`
	// Value is the unique payload of an enqueue, and how deliveries are
	// matched back to it.
	Value    string `json:"value,omitempty"`
	Group    string `json:"group,omitempty"`
	DedupKey string `json:"dedup_key,omitempty"`
	// MessageID is the enqueue's answer, or the subject of ack/extend/final.
	MessageID    string `json:"message_id,omitempty"`
	Deduplicated bool   `json:"deduplicated,omitempty"`

	// VisibilityMs is what a receive or extend asked for.
	VisibilityMs int64      `json:"visibility_ms,omitempty"`
	Deliveries   []Delivery `json:"deliveries,omitempty"`

	// Receipt and Epoch name the lease an ack/nack/extend used.
	Receipt string `json:"receipt,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	// DeadlineMs is an extend's answer (shard clock).
	DeadlineMs int64 `json:"deadline_ms,omitempty"`

	// Final is the server's record for FFinal and FDead.
	Final *Record `json:"final,omitempty"`

	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Note classifies a RESOURCE_EXHAUSTED refusal (a fail: nothing was
	// applied): NoteQuota past a tenant's or queue's quota, NoteExhausted
	// past a node's own limit (memory, disk, the send queue).
	Note string `json:"note,omitempty"`
	// RetryAfterMs is the time to retry a RESOURCE_EXHAUSTED refusal
	// carried (google.rpc.RetryInfo, as client.RetryAfter reads it),
	// rounded up to whole milliseconds; 0: it carried none.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Fault describes a nemesis operation, or names a phase.
	Fault string `json:"fault,omitempty"`
	// Kind is a nemesis operation's fault kind (partition, kill, ...).
	Kind string `json:"kind,omitempty"`

	// Setup is the run's configuration (phase "setup").
	Setup *Setup `json:"setup,omitempty"`
	// Shards is the final replica comparison (phase "replicas").
	Shards []ShardReplicas `json:"shards,omitempty"`

	// Cron is a cron message (FCron) or schedule (FCronState).
	Cron *Cron `json:"cron,omitempty"`

	// Attrs and MsgType are a publish's attributes and message type.
	Attrs   map[string]string `json:"attrs,omitempty"`
	MsgType string            `json:"msg_type,omitempty"`
	// Copies is a publish's answer: how many subscriptions received a
	// copy (SendResponse.deliveries).
	Copies uint32 `json:"copies,omitempty"`
	// Sub is what an FSubscribe creates.
	Sub *Subscription `json:"sub,omitempty"`
}

// Subscription is a topic or a subscription as the fan-out checker needs
// it. Every subscription the workload creates replays nothing (it only
// receives what is published after its creation).
type Subscription struct {
	Topic  string `json:"topic"`
	FIFO   bool   `json:"fifo,omitempty"`
	Filter string `json:"filter,omitempty"`
	// MaxReceives is the receive count at which a copy is dead-lettered.
	MaxReceives uint32 `json:"max_receives,omitempty"`
	// Poison: the subscription's consumers dead-letter the copies of
	// publishes whose attribute PoisonAttr is PoisonValue (by hand, or
	// by nacking them until MaxReceives); the others ack them.
	Poison bool `json:"poison,omitempty"`
}

// The attribute that marks a publish as poison for the subscriptions
// with Subscription.Poison.
const (
	PoisonAttr  = "kind"
	PoisonValue = "poison"
)

// Cron is what the cron checker needs of a schedule's message or of its
// final record.
type Cron struct {
	Schedule string `json:"schedule"`
	// Of an FCron: the slot (Unix ms), or the manual trigger's number.
	SlotMs  int64  `json:"slot_ms,omitempty"`
	Trigger uint64 `json:"trigger,omitempty"`
	// Of an FCronState: the schedule's "@every" interval, start, misfire
	// policy ("catch-up N", "skip", "fire-once") and record.
	EveryMs       int64  `json:"every_ms,omitempty"`
	CreatedMs     int64  `json:"created_ms,omitempty"`
	Misfire       string `json:"misfire,omitempty"`
	CatchUpMax    uint32 `json:"catch_up_max,omitempty"`
	LastSlotMs    int64  `json:"last_slot_ms,omitempty"`
	Fired         uint64 `json:"fired,omitempty"`
	Skipped       uint64 `json:"skipped,omitempty"`
	TriggersFired uint64 `json:"triggers_fired,omitempty"`
}

// Setup is what a run was asked to do, so that a history alone says what
// must have happened: which fault kinds must have fired, which shards and
// replicas must have been compared, what each queue's policy is.
type Setup struct {
	// Nemesis lists the fault kinds requested; each must fire.
	Nemesis     []string `json:"nemesis"`
	Nodes       int      `json:"nodes"`
	Shards      int      `json:"shards"`
	Replication int      `json:"replication"`
	// ClockBoundMs is the nodes' --max-clock-offset (docs/clock.md):
	// leases keep their length in real time within twice it.
	ClockBoundMs int64        `json:"clock_bound_ms"`
	Queues       []QueueSetup `json:"queues"`
	// Tenants are the tenants a workload created, with the quotas the
	// checker holds their queues to.
	Tenants []TenantSetup `json:"tenants,omitempty"`
	// StartUnixMs is the harness's wall clock (Unix ms) when the recorder
	// started: Op.Time (monotonic) plus this is the wall clock of an
	// operation, which lease deadlines (shard clock) are compared with.
	// 0: unknown.
	StartUnixMs int64 `json:"start_unix_ms,omitempty"`
}

// TenantSetup is a tenant's quotas as far as the checkers need them
// (0: no limit). They cap the tenant's queues together, over the whole
// cluster; each shard enforces its share, the limit over the shard count
// rounded up (docs/tenancy.md).
type TenantSetup struct {
	Name        string `json:"name"`
	MaxMessages uint64 `json:"max_messages,omitempty"`
	MaxInFlight uint64 `json:"max_in_flight,omitempty"`
}

// QueueSetup is a queue's policy as far as the checkers need it.
type QueueSetup struct {
	Name         string `json:"name"`
	FIFO         bool   `json:"fifo,omitempty"`
	VisibilityMs int64  `json:"visibility_ms"`
	// MaxReceives is the receive count at which a message is
	// dead-lettered, never earlier.
	MaxReceives uint32 `json:"max_receives"`
}

// ShardReplicas is the final phase's view of one shard's replicas.
type ShardReplicas struct {
	Shard  uint32 `json:"shard"`
	Leader string `json:"leader,omitempty"`
	// Replicas is the shard's replica set as the nodes report it.
	Replicas []string `json:"replicas"`
	// Applied and Commit are each replica's indexes (Cluster.Status) at
	// the end of the wait for convergence.
	Applied map[string]uint64 `json:"applied"`
	Commit  map[string]uint64 `json:"commit,omitempty"`
	// Digests is each replica's FSM digest (Peer.ShardDigest) as
	// "<applied index>:<sha256 hex>"; Errors says why a replica gave none.
	Digests map[string]string `json:"digests,omitempty"`
	Errors  []string          `json:"errors,omitempty"`
}

// Delivery is one message leased by a receive.
type Delivery struct {
	MessageID    string `json:"message_id"`
	Receipt      string `json:"receipt"`
	Epoch        uint64 `json:"epoch"`
	ReceiveCount uint32 `json:"receive_count"`
	// DeadlineMs is the lease deadline on the shard's clock.
	DeadlineMs int64  `json:"deadline_ms"`
	Value      string `json:"value"`
	Group      string `json:"group,omitempty"`
}

// Record is the server's view of a message (GetMessage).
type Record struct {
	State        string `json:"state"`
	Value        string `json:"value,omitempty"`
	Group        string `json:"group,omitempty"`
	DedupKey     string `json:"dedup_key,omitempty"`
	LeaseEpoch   uint64 `json:"lease_epoch"`
	LeaseDeadMs  int64  `json:"lease_deadline_ms"`
	ReceiveCount uint32 `json:"receive_count"`
	// DeadReason is why a DEAD message is dead (MAX_RECEIVES, ...).
	DeadReason string    `json:"dead_reason,omitempty"`
	Seq        uint64    `json:"seq"`
	Attempts   []Attempt `json:"attempts,omitempty"`
}

// Attempt is one delivery in the server's history of a message.
type Attempt struct {
	Epoch      uint64 `json:"epoch"`
	ReceivedMs int64  `json:"received_ms"`
	EndedMs    int64  `json:"ended_ms"`
	Outcome    string `json:"outcome"`
	Consumer   string `json:"consumer,omitempty"`
}

// Notes of RESOURCE_EXHAUSTED refusals (Op.Note).
const (
	NoteQuota     = "quota"
	NoteExhausted = "exhausted"
)

// Server states and outcomes as the history spells them (the fsmpb enum
// names without prefix), so checkers need not import the protos.
const (
	StateAcked  = "ACKED"
	StateDead   = "DEAD"
	StateLeased = "LEASED"
	OutExpired  = "EXPIRED"
	OutAcked    = "ACKED"
	OutNacked   = "NACKED"
)
