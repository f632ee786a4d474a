// Package client is the Go SDK for raftq. It speaks the public gRPC API
// (api/raftqv1) to any node, caches the cluster's shard map so calls that
// belong to one shard (grouped sends, acks, nacks, lease extensions) go
// straight to that shard's leader, and retries what is safe to retry.
//
// Routing and retry rules, in short (docs/client.md has the full story):
//
//   - A send whose shard is fixed goes to that shard's leader: the slot
//     table of the cached shard map (wire.SlotTable.ShardForMessage)
//     places a grouped message by its group and an ungrouped one by its
//     dedup key (with AutoDedup, every send has one). A stale table costs
//     a hop: the node places the message by its own table.
//     A send with neither goes to the next node in round-robin order (the
//     server places it). A receive goes to the leader of the next shard in
//     rotation, whose router gathers across shards, its own first.
//   - Ack, Nack, Extend and DeadLetter go to the leader of the receipt's shard;
//     GetMessage and Cancel to the leader of the message id's shard.
//   - UNAVAILABLE with the "raftq-leader" trailer is a refusal: nothing was
//     applied. With a leader address in it the call is retried at once at
//     that node; without one, on another node after a backoff.
//   - UNAVAILABLE without the trailer, connection failures, a node that
//     stops answering mid-call (a liveness probe, WithLivenessProbe) and an
//     attempt's own timeout leave the outcome unknown: the call is retried
//     only if repeating it cannot duplicate work, at the leader a
//     "raftq-leader-hint" trailer names, else on another node after a
//     backoff. An attempt that could not be sent (no connection within the
//     probe's timeout, a node marked silent) is a refusal.
//   - A node that just failed a call is passed over for 2 s.
//   - Backoff is exponential with equal jitter (half of each step fixed,
//     so the default budget retries for at least 3.3 s, longer than a
//     failover), bounded by the context deadline and the retry budget
//     (WithRetry).
//   - INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ALREADY_EXISTS and
//     RESOURCE_EXHAUSTED are never retried.
//   - A send is retried after an unknown outcome only when it carries a dedup
//     key, so the retry cannot enqueue the message twice within the queue's
//     dedup window. With AutoDedup on (the default) every send without a key
//     gets a random one.
//
// Errors match sentinels with errors.Is (ErrNotFound, ErrStaleReceipt, ...).
// ErrOutcomeUnknown marks a call that may have taken effect without the
// client learning so, ErrNotSent one that certainly did not leave it.
// Batch calls (AckBatch, SendBatch) return a *BatchError when any item
// failed, never nil. Close fails what is in flight; Flush and Drain let it
// finish first.
package client
