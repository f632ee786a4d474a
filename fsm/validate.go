package fsm

import (
	"fmt"
	"strings"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/wire"
	"google.golang.org/protobuf/proto"
)

// Policy defaults, filled in by NormalizePolicy. They are part of the
// replicated logic: changing one changes what replicas compute, so a change
// needs a new Entry version.
const (
	DefaultVisibilityMs          = 30_000
	DefaultMaxReceiveCount       = 10
	DefaultBackoffBaseMs         = 1_000
	DefaultBackoffMaxMs          = 5 * 60_000
	DefaultDedupWindowMs         = 5 * 60_000
	DefaultRetentionMs           = 4 * 24 * 60 * 60_000
	DefaultCompletedRetentionMs  = 60 * 60_000
	DefaultMaxMessageBytes       = MaxBodyBytes
	defaultDelayFromQueue        = -1 // NewMessage.delay_ms: use the queue's delay_ms
	maxRedriveBatch              = 1000
	maxCancelBatch               = MaxEnqueueBatch
	maxItemsPerLeaseCommandBatch = MaxReceiveBatch
)

// ValidateQueueName checks a queue name: 1 to MaxQueueNameLen characters
// of [A-Za-z0-9._-], optionally after a tenant and '/' ("acme/jobs",
// ValidateTenantName). Apply and snapshot restore use it, so it must keep
// accepting every name it ever accepted (a replica replaying an old log
// must create the same queues); rules for new names only are in
// ValidateNewQueueName.
func ValidateQueueName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: queue name is empty", ErrInvalidArgument)
	}
	if len(name) > MaxQueueNameLen {
		return fmt.Errorf("%w: queue name is %d bytes, limit %d", ErrInvalidArgument, len(name), MaxQueueNameLen)
	}
	tenant, own, ok := strings.Cut(name, TenantSep)
	if !ok {
		return validateQueueChars(name, name)
	}
	if err := ValidateTenantName(tenant); err != nil {
		return fmt.Errorf("queue name %q: %w", name, err)
	}
	return validateQueueChars(name, own)
}

func nameChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidateNewQueueName is ValidateQueueName plus the rules for a queue
// being created: the name starts with a letter, a digit or '_'. "." and
// ".." read as paths and "-x" as a command-line flag, so they are refused
// when created. Existing queues with such names keep working: only the
// API's create path applies it, never Apply or a restore.
func ValidateNewQueueName(name string) error {
	if err := ValidateQueueName(name); err != nil {
		return err
	}
	own := name[len(TenantOf(name)):]
	own = strings.TrimPrefix(own, TenantSep)
	if c := own[0]; c == '.' || c == '-' {
		return fmt.Errorf("%w: queue name %q starts with %q; start it with a letter, a digit or '_'", ErrInvalidArgument, name, c)
	}
	return nil
}

func checkRange(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: %s is %d, allowed %d..%d", ErrInvalidArgument, field, v, lo, hi)
	}
	return nil
}

// ValidatePolicy checks a policy as given by a user, before defaults are
// filled (zero means default). A nil policy is valid (all defaults).
func ValidatePolicy(p *fsmpb.QueuePolicy) error {
	if p == nil {
		return nil
	}
	switch p.GetMode() {
	case fsmpb.QueueMode_QUEUE_MODE_UNSPECIFIED, fsmpb.QueueMode_QUEUE_MODE_STANDARD, fsmpb.QueueMode_QUEUE_MODE_FIFO:
	default:
		return fmt.Errorf("%w: unknown queue mode %d", ErrInvalidArgument, p.GetMode())
	}
	checks := []error{
		checkRange("visibility_timeout_ms", p.GetVisibilityTimeoutMs(), 0, MaxVisibilityMs),
		checkRange("max_receive_count", int64(p.GetMaxReceiveCount()), 0, MaxReceiveCountLimit),
		checkRange("backoff_base_ms", p.GetBackoffBaseMs(), 0, MaxDelayMs),
		checkRange("backoff_max_ms", p.GetBackoffMaxMs(), 0, MaxDelayMs),
		checkRange("dedup_window_ms", p.GetDedupWindowMs(), 0, MaxRetentionMs),
		checkRange("retention_ms", p.GetRetentionMs(), 0, MaxRetentionMs),
		checkRange("dead_retention_ms", p.GetDeadRetentionMs(), 0, MaxDeadRetentionMs),
		checkRange("delay_ms", p.GetDelayMs(), 0, MaxDelayMs),
		checkRange("max_message_bytes", int64(p.GetMaxMessageBytes()), 0, MaxBodyBytes),
		checkRange("completed_retention_ms", p.GetCompletedRetentionMs(), 0, MaxRetentionMs),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if err := validateCapacity(p); err != nil {
		return err
	}
	if err := validateResultBound(p); err != nil {
		return err
	}
	if err := ValidateQuotas(p.GetQuotas(), false); err != nil {
		return err
	}
	if err := validateShardQuota(p.GetShardQuota()); err != nil {
		return err
	}
	if err := validateFanout(p); err != nil {
		return err
	}
	if p.GetBackoffBaseMs() > 0 && p.GetBackoffMaxMs() > 0 && p.GetBackoffMaxMs() < p.GetBackoffBaseMs() {
		return fmt.Errorf("%w: backoff_max_ms %d is below backoff_base_ms %d", ErrInvalidArgument, p.GetBackoffMaxMs(), p.GetBackoffBaseMs())
	}
	return nil
}

// validateCapacity checks the per-shard capacity limits. A byte limit below
// the largest allowed body would refuse that body on an empty queue, which
// is a configuration mistake, not a limit.
func validateCapacity(p *fsmpb.QueuePolicy) error {
	if n := p.GetMaxMessagesPerShard(); n > MaxMessagesPerShardLimit {
		return fmt.Errorf("%w: max_messages_per_shard is %d, allowed 0..%d", ErrInvalidArgument, n, uint64(MaxMessagesPerShardLimit))
	}
	b := p.GetMaxBytesPerShard()
	if b > MaxBytesPerShardLimit {
		return fmt.Errorf("%w: max_bytes_per_shard is %d, allowed 0..%d", ErrInvalidArgument, b, uint64(MaxBytesPerShardLimit))
	}
	body := uint64(p.GetMaxMessageBytes())
	if body == 0 {
		body = DefaultMaxMessageBytes
	}
	if b > 0 && b < body {
		return fmt.Errorf("%w: max_bytes_per_shard %d is below max_message_bytes %d", ErrInvalidArgument, b, body)
	}
	return nil
}

// NormalizePolicy returns a copy of p with every zero field set to its
// default. p must have passed ValidatePolicy.
func NormalizePolicy(p *fsmpb.QueuePolicy) *fsmpb.QueuePolicy {
	n := &fsmpb.QueuePolicy{}
	if p != nil {
		n = proto.Clone(p).(*fsmpb.QueuePolicy)
	}
	if n.Mode == fsmpb.QueueMode_QUEUE_MODE_UNSPECIFIED {
		n.Mode = fsmpb.QueueMode_QUEUE_MODE_STANDARD
	}
	fill := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	fill(&n.VisibilityTimeoutMs, DefaultVisibilityMs)
	fill(&n.BackoffBaseMs, DefaultBackoffBaseMs)
	fill(&n.BackoffMaxMs, DefaultBackoffMaxMs)
	fill(&n.DedupWindowMs, DefaultDedupWindowMs)
	fill(&n.RetentionMs, DefaultRetentionMs)
	fill(&n.CompletedRetentionMs, DefaultCompletedRetentionMs)
	if n.BackoffMaxMs < n.BackoffBaseMs {
		// Only the base was given and it exceeds the default cap.
		n.BackoffMaxMs = n.BackoffBaseMs
	}
	if n.MaxReceiveCount == 0 {
		n.MaxReceiveCount = DefaultMaxReceiveCount
	}
	if n.MaxMessageBytes == 0 {
		n.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return n
}

// ValidateMessage checks a new message against its queue's normalized policy
// (nil means the defaults). Limits that depend on the FSM clock (run_at_ms
// horizon) are checked in apply.
func ValidateMessage(m *fsmpb.NewMessage, p *fsmpb.QueuePolicy) error {
	if m == nil {
		return fmt.Errorf("%w: message is empty", ErrInvalidArgument)
	}
	if p == nil {
		p = NormalizePolicy(nil)
	}
	limit := int(p.GetMaxMessageBytes())
	if limit <= 0 || limit > MaxBodyBytes {
		limit = MaxBodyBytes
	}
	if len(m.GetBody()) > limit {
		return fmt.Errorf("%w: body is %d bytes, limit %d", ErrInvalidArgument, len(m.GetBody()), limit)
	}
	if len(m.GetAttributes()) > MaxAttributes {
		return fmt.Errorf("%w: %d attributes, limit %d", ErrInvalidArgument, len(m.GetAttributes()), MaxAttributes)
	}
	total := 0
	for k, v := range m.GetAttributes() {
		if k == "" {
			return fmt.Errorf("%w: attribute key is empty", ErrInvalidArgument)
		}
		if len(k) > MaxAttributeKeyBytes {
			return fmt.Errorf("%w: attribute key is %d bytes, limit %d", ErrInvalidArgument, len(k), MaxAttributeKeyBytes)
		}
		total += len(k) + len(v)
	}
	if total > MaxAttributesBytes {
		return fmt.Errorf("%w: attributes are %d bytes, limit %d", ErrInvalidArgument, total, MaxAttributesBytes)
	}
	if len(m.GetType()) > MaxTypeLen {
		return fmt.Errorf("%w: type is %d bytes, limit %d", ErrInvalidArgument, len(m.GetType()), MaxTypeLen)
	}
	if len(m.GetGroupId()) > MaxGroupIDLen {
		return fmt.Errorf("%w: group id is %d bytes, limit %d", ErrInvalidArgument, len(m.GetGroupId()), MaxGroupIDLen)
	}
	if p.GetMode() == fsmpb.QueueMode_QUEUE_MODE_FIFO && m.GetGroupId() == "" {
		return fmt.Errorf("%w: a FIFO queue needs a message group id", ErrInvalidArgument)
	}
	if len(m.GetDedupKey()) > MaxDedupKeyLen {
		return fmt.Errorf("%w: dedup key is %d bytes, limit %d", ErrInvalidArgument, len(m.GetDedupKey()), MaxDedupKeyLen)
	}
	if err := validateUnique(m); err != nil {
		return err
	}
	if m.GetPriority() > MaxPriority {
		return fmt.Errorf("%w: priority is %d, allowed 0..%d", ErrInvalidArgument, m.GetPriority(), MaxPriority)
	}
	if d := m.GetDelayMs(); d != defaultDelayFromQueue {
		if err := checkRange("delay_ms", d, 0, MaxDelayMs); err != nil {
			return err
		}
	}
	if m.GetRunAtMs() < 0 {
		return fmt.Errorf("%w: run_at_ms is negative", ErrInvalidArgument)
	}
	return validateRetry(m)
}

// Limits of the slot move commands (growing the shard count).
const (
	// MaxSlotCount caps a cluster's slot count: 4096 bootstrap shards.
	MaxSlotCount = 4096 * wire.SlotsPerShard
	// MaxSealSlots caps the slots one SealSlots names.
	MaxSealSlots = 1 << 16
	// MaxGroupItems caps the groups one HoldGroups or ReleaseGroups names
	// (up to about 260 KB of names); a move holding more proposes several.
	MaxGroupItems = 1000
)

// ValidateSealSlots checks a SealSlots: a move id, a slot count that is a
// multiple of wire.SlotsPerShard, and 1 to MaxSealSlots slots below it.
func ValidateSealSlots(c *fsmpb.SealSlots) error {
	if c.GetMoveId() == 0 {
		return fmt.Errorf("%w: move_id is 0", ErrInvalidArgument)
	}
	n := c.GetSlotCount()
	if n == 0 || n%wire.SlotsPerShard != 0 || n > MaxSlotCount {
		return fmt.Errorf("%w: slot_count is %d, want a multiple of %d up to %d", ErrInvalidArgument, n, wire.SlotsPerShard, MaxSlotCount)
	}
	if len(c.GetSlots()) == 0 || len(c.GetSlots()) > MaxSealSlots {
		return fmt.Errorf("%w: %d slots, allowed 1..%d", ErrInvalidArgument, len(c.GetSlots()), MaxSealSlots)
	}
	for _, s := range c.GetSlots() {
		if s >= n {
			return fmt.Errorf("%w: slot %d is not below slot_count %d", ErrInvalidArgument, s, n)
		}
	}
	return nil
}

// ValidateHoldGroups checks a HoldGroups: a move id and 1 to MaxGroupItems
// well-formed groups.
func ValidateHoldGroups(c *fsmpb.HoldGroups) error {
	if c.GetMoveId() == 0 {
		return fmt.Errorf("%w: move_id is 0", ErrInvalidArgument)
	}
	if len(c.GetItems()) == 0 {
		return fmt.Errorf("%w: no groups to hold", ErrInvalidArgument)
	}
	return validateGroups(c.GetItems())
}

// ValidateReleaseGroups checks a ReleaseGroups: a move id, and either all
// or 1 to MaxGroupItems well-formed groups.
func ValidateReleaseGroups(c *fsmpb.ReleaseGroups) error {
	if c.GetMoveId() == 0 {
		return fmt.Errorf("%w: move_id is 0", ErrInvalidArgument)
	}
	switch {
	case c.GetAll() && len(c.GetItems()) > 0:
		return fmt.Errorf("%w: release names %d groups and all: name either", ErrInvalidArgument, len(c.GetItems()))
	case c.GetAll():
		return nil
	case len(c.GetItems()) == 0:
		return fmt.Errorf("%w: no groups to release", ErrInvalidArgument)
	}
	return validateGroups(c.GetItems())
}

func validateGroups(items []*fsmpb.QueueGroup) error {
	if len(items) > MaxGroupItems {
		return fmt.Errorf("%w: %d groups in one command, limit %d", ErrInvalidArgument, len(items), MaxGroupItems)
	}
	for _, it := range items {
		if err := ValidateQueueName(it.GetQueue()); err != nil {
			return err
		}
		if g := it.GetGroup(); g == "" || len(g) > MaxGroupIDLen {
			return fmt.Errorf("%w: group id of queue %q is %d bytes, allowed 1..%d", ErrInvalidArgument, it.GetQueue(), len(g), MaxGroupIDLen)
		}
	}
	return nil
}
