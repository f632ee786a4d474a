package fsm

import (
	"fmt"
	"math"

	"github.com/raftq/raftq/fsm/fsmpb"
)

// Quotas (docs/tenancy.md). Meta divides each quota of a queue and of its
// tenant by the shard count and sends every shard its share in the
// queue's policy (QueuePolicy.shard_quota); Apply enforces the shares of
// depth, bytes and leases here, deterministically. Rates are the shard
// leader's to enforce (shard/ratelimit.go): a token bucket is time, which
// Apply must not read.

// Quota limits: far above what a node holds, they catch nonsense such as
// a negative number wrapped to uint64.
const (
	MaxQuotaRate   = 10_000_000
	MaxQuotaQueues = 1_000_000
	// MaxTenantWeight bounds a tenant's weight: a thousand to one is
	// already a tenant that waits behind every other.
	MaxTenantWeight = 1000
)

// ValidateQuotas checks quotas set on a tenant (tenant true) or on a
// queue. max_queues and max_message_bytes limit a tenant's queues, so a
// queue's own quotas leave them 0.
func ValidateQuotas(q *fsmpb.Quotas, tenant bool) error {
	if q == nil {
		return nil
	}
	checks := []error{
		checkRange("quotas.send_rate", int64(q.GetSendRate()), 0, MaxQuotaRate),
		checkRange("quotas.send_burst", int64(q.GetSendBurst()), 0, MaxQuotaRate),
		checkRange("quotas.max_message_bytes", int64(q.GetMaxMessageBytes()), 0, MaxBodyBytes),
		checkRange("quotas.max_queues", int64(q.GetMaxQueues()), 0, MaxQuotaQueues),
		checkRange("quotas.weight", int64(q.GetWeight()), 0, MaxTenantWeight),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if q.GetMaxMessages() > MaxMessagesPerShardLimit || q.GetMaxInFlight() > MaxMessagesPerShardLimit {
		return fmt.Errorf("%w: quotas.max_messages and max_in_flight are at most %d", ErrInvalidArgument, uint64(MaxMessagesPerShardLimit))
	}
	if q.GetMaxBytes() > MaxBytesPerShardLimit {
		return fmt.Errorf("%w: quotas.max_bytes is at most %d", ErrInvalidArgument, uint64(MaxBytesPerShardLimit))
	}
	if q.GetSendBurst() > 0 && q.GetSendRate() == 0 {
		return fmt.Errorf("%w: quotas.send_burst is set without send_rate", ErrInvalidArgument)
	}
	if !tenant && (q.GetMaxQueues() > 0 || q.GetMaxMessageBytes() > 0 || q.GetWeight() > 0) {
		return fmt.Errorf("%w: quotas.max_queues, max_message_bytes and weight are a tenant's; a queue sets max_message_bytes in its policy", ErrInvalidArgument)
	}
	return nil
}

// validateShardQuota checks the share meta computed: only its doubles can
// be out of range.
func validateShardQuota(sq *fsmpb.ShardQuota) error {
	for _, v := range []float64{sq.GetSendRate(), sq.GetSendBurst(), sq.GetTenantSendRate(), sq.GetTenantSendBurst()} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxQuotaRate {
			return fmt.Errorf("%w: shard_quota rate %v outside 0..%d", ErrInvalidArgument, v, MaxQuotaRate)
		}
	}
	return nil
}

// tenantUse is what the queues of one tenant hold on this shard; attach
// and detach keep it in step with their queues' counts.
type tenantUse struct {
	live, bytes, leased uint64
	queues              int
}

// TenantUsage is a tenant's use of one shard.
type TenantUsage struct {
	Queues                    int
	Live, LiveBytes, InFlight uint64
}

// useOf returns the usage record of a queue's tenant, nil for a queue of
// no tenant, creating it with the queue.
func (s *state) useOf(name string) *tenantUse {
	t := TenantOf(name)
	if t == "" {
		return nil
	}
	u, ok := s.tenants[t]
	if !ok {
		u = &tenantUse{}
		s.tenants[t] = u
	}
	u.queues++
	return u
}

// dropUse forgets a deleted queue's tenant once it has no queue left
// (remove has taken its messages off the counts already).
func (s *state) dropUse(q *queue) {
	if q.tenant == nil {
		return
	}
	q.tenant.queues--
	if q.tenant.queues == 0 {
		delete(s.tenants, TenantOf(q.name))
	}
}

// quotaStatus refuses a body of n bytes past the shard's share of the
// queue's or its tenant's quota on depth or bytes.
func (s *state) quotaStatus(q *queue, n int) *fsmpb.Status {
	sq := q.policy.GetShardQuota()
	if sq == nil {
		return nil
	}
	if lim := sq.GetMaxMessages(); lim > 0 && q.liveCount() >= lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is at its quota: %d live messages on this shard, its share of quotas.max_messages is %d", q.name, q.liveCount(), lim)
	}
	if lim := sq.GetMaxBytes(); lim > 0 && q.liveBytes+uint64(n) > lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is at its quota: %d live body bytes + %d on this shard would pass its share of quotas.max_bytes, %d", q.name, q.liveBytes, n, lim)
	}
	u := q.tenant
	if u == nil {
		return nil
	}
	if lim := sq.GetTenantMaxMessages(); lim > 0 && u.live >= lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "tenant %q is at its quota: %d live messages on this shard, its share of quotas.max_messages is %d", TenantOf(q.name), u.live, lim)
	}
	if lim := sq.GetTenantMaxBytes(); lim > 0 && u.bytes+uint64(n) > lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "tenant %q is at its quota: %d live body bytes + %d on this shard would pass its share of quotas.max_bytes, %d", TenantOf(q.name), u.bytes, n, lim)
	}
	return nil
}

// leaseRoom is how many more messages of q this shard may lease under the
// in-flight quotas of the queue and its tenant.
func (q *queue) leaseRoom() uint64 {
	room := uint64(math.MaxUint64)
	sq := q.policy.GetShardQuota()
	if sq == nil {
		return room
	}
	if lim := sq.GetMaxInFlight(); lim > 0 {
		room = min(room, lim-min(lim, q.nLeased))
	}
	if lim := sq.GetTenantMaxInFlight(); lim > 0 && q.tenant != nil {
		room = min(room, lim-min(lim, q.tenant.leased))
	}
	return room
}

// leaseEnded wakes the long polls an ending lease may let lease again:
// the queue's, when it has an in-flight quota, and every queue of its
// tenant when the tenant was at its own. Called before the counts drop.
func (s *state) leaseEnded(q *queue) {
	sq := q.policy.GetShardQuota()
	if s.touched == nil || sq == nil {
		return
	}
	if sq.GetMaxInFlight() > 0 {
		s.touched[q.name] = struct{}{}
	}
	if lim := sq.GetTenantMaxInFlight(); lim > 0 && q.tenant != nil && q.tenant.leased >= lim {
		for name, o := range s.queues {
			if o.tenant == q.tenant && o.ready.Len() > 0 {
				s.touched[name] = struct{}{}
			}
		}
	}
}

// inFlightStatus explains a receive refused for the in-flight quota.
func (q *queue) inFlightStatus() *fsmpb.Status {
	sq := q.policy.GetShardQuota()
	if lim := sq.GetMaxInFlight(); lim > 0 && q.nLeased >= lim {
		return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "queue %q is at its quota: %d messages in flight on this shard, its share of quotas.max_in_flight is %d; ack or nack some first", q.name, q.nLeased, lim)
	}
	return status(fsmpb.Code_CODE_RESOURCE_EXHAUSTED, "tenant %q is at its quota: %d messages in flight on this shard, its share of quotas.max_in_flight is %d; ack or nack some first", TenantOf(q.name), q.tenant.leased, sq.GetTenantMaxInFlight())
}

// TenantUsage returns what a tenant's queues hold on this shard.
func (f *FSM) TenantUsage(tenant string) TenantUsage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, ok := f.s.tenants[tenant]
	if !ok {
		return TenantUsage{}
	}
	return TenantUsage{Queues: u.queues, Live: u.live, LiveBytes: u.bytes, InFlight: u.leased}
}

// ShardQuota returns the shard's share of a queue's quotas, nil if it has
// none or the queue is not here. The shard leader reads the rates from it
// on every send; the value is never changed once set (an upsert replaces
// the policy), so it is returned without a copy.
func (f *FSM) ShardQuota(queue string) *fsmpb.ShardQuota {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok {
		return nil
	}
	return q.policy.GetShardQuota()
}

// InFlightRefusal is what a receive of queue would be refused with for
// its in-flight quota: nil unless messages are ready and the quota lets
// none be leased. The shard leader answers it without a raft round.
func (f *FSM) InFlightRefusal(queue string) *fsmpb.Status {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok || q.ready.Len() == 0 || q.paused() || q.leaseRoom() > 0 {
		return nil
	}
	return q.inFlightStatus()
}

// FullStatus is the refusal every new message of queue would get now for
// a limit on the count of live messages (max_messages_per_shard, the
// queue's or its tenant's share of max_messages), or nil. The shard
// leader answers such sends without a raft round; Apply still decides
// the ones it proposes.
func (f *FSM) FullStatus(queue string) *fsmpb.Status {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q, ok := f.s.queues[queue]
	if !ok {
		return nil
	}
	if lim := q.policy.GetMaxMessagesPerShard(); lim > 0 && q.liveCount() >= lim {
		return f.s.checkCapacity(q, 0, false)
	}
	sq := q.policy.GetShardQuota()
	if lim := sq.GetMaxMessages(); lim > 0 && q.liveCount() >= lim {
		return f.s.quotaStatus(q, 0)
	}
	if lim := sq.GetTenantMaxMessages(); lim > 0 && q.tenant != nil && q.tenant.live >= lim {
		return f.s.quotaStatus(q, 0)
	}
	return nil
}
