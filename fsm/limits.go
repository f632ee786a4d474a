package fsm

// Limits enforced both by the API layer (before proposing) and by Apply
// (deterministically, so a bad command that slipped through changes nothing).
const (
	// MaxBodyBytes caps one message body (the public contract: 256 KiB).
	MaxBodyBytes = 256 << 10
	// MaxAttributes caps the number of attributes of one message.
	MaxAttributes = 64
	// MaxAttributeKeyBytes caps one attribute key.
	MaxAttributeKeyBytes = 128
	// MaxAttributesBytes caps the sum of all attribute keys and values.
	MaxAttributesBytes = 16 << 10
	// MaxQueueNameLen caps a queue name ([A-Za-z0-9._-]).
	MaxQueueNameLen = 128
	// MaxGroupIDLen caps a message_group_id.
	MaxGroupIDLen = 128
	// MaxDedupKeyLen caps a dedup key.
	MaxDedupKeyLen = 128
	// MaxTypeLen caps a message type.
	MaxTypeLen = 128
	// MaxPriority is the highest priority; 0 is the lowest.
	MaxPriority = 9
	// MaxReceiveBatch caps messages leased by one Receive.
	MaxReceiveBatch = 1000
	// MaxEnqueueBatch caps messages in one Enqueue command.
	MaxEnqueueBatch = 1000
	// MaxVisibilityMs caps a lease (12 h, as SQS).
	MaxVisibilityMs = 12 * 60 * 60 * 1000
	// MaxDelayMs caps delay_ms and how far run_at_ms may lie in the future.
	// 365 days covers yearly scheduled jobs while keeping every deadline far
	// from int64 overflow and bounding how long a delayed message pins memory.
	MaxDelayMs = 365 * 24 * 60 * 60 * 1000
	// MaxHistory is the number of delivery attempts kept per message (most
	// recent); older attempts are dropped so the record stays bounded.
	MaxHistory = 10
	// MaxRetentionMs caps a queue's retention_ms (and completed/dedup windows).
	MaxRetentionMs = 14 * 24 * 60 * 60 * 1000
	// MaxDeadRetentionMs caps dead_retention_ms: a DLQ is where failures
	// wait for a person, who may take longer than a live message may wait.
	MaxDeadRetentionMs = 365 * 24 * 60 * 60 * 1000
	// MaxReceiveCountLimit caps a queue's max_receive_count.
	MaxReceiveCountLimit = 1000
	// MaxCompletedRecords bounds acked records kept per shard for status
	// look-ups; the oldest go first when it is exceeded.
	MaxCompletedRecords = 100_000
	// MaxErrorLen caps the error text kept with a nack or dead-letter.
	MaxErrorLen = 1024
	// MaxConsumerLen caps a consumer name kept in history.
	MaxConsumerLen = 128
	// MaxMessagesPerShardLimit and MaxBytesPerShardLimit cap a queue's
	// capacity settings; they only catch nonsense (a negative number wrapped
	// to uint64), far above what a node's memory holds.
	MaxMessagesPerShardLimit = 1 << 40
	MaxBytesPerShardLimit    = 1 << 50
)
