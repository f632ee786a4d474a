package meta

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

// Tenants (log format 6, docs/tenancy.md): a tenant's queues are named
// "TENANT/QUEUE" (fsm.TenantOf), its API keys carry its name, and its
// quotas cap them together. Quotas on depth, bytes and leases are split
// over the shards (ShardPolicy) and enforced by each shard's Apply; rates
// by each shard leader.

// MaxTenants bounds the tenants of a cluster, so the meta snapshot stays
// small.
const MaxTenants = 10000

func (f *FSM) putTenant(c *metapb.PutTenant, nowMs int64) *metapb.Result {
	t := c.GetTenant()
	if err := validateTenant(t); err != nil {
		return &metapb.Result{Code: metapb.Code_CODE_INVALID, Message: err.Error()}
	}
	old, ok := f.tenants[t.GetName()]
	switch {
	case c.GetCreate() && ok:
		if proto.Equal(old.GetQuotas(), t.GetQuotas()) {
			return &metapb.Result{} // a retried create
		}
		return &metapb.Result{Code: metapb.Code_CODE_EXISTS, Message: fmt.Sprintf("tenant %q exists with other quotas", t.GetName())}
	case !c.GetCreate() && !ok:
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("tenant %q not found", t.GetName())}
	case !ok && len(f.tenants) >= MaxTenants:
		return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf("the cluster holds %d tenants, the most it keeps", MaxTenants)}
	}
	n := &metapb.Tenant{Name: t.GetName(), Quotas: proto.CloneOf(t.GetQuotas()), CreatedMs: nowMs, UpdatedMs: nowMs}
	if ok {
		n.CreatedMs = old.GetCreatedMs()
	}
	f.tenants[n.GetName()] = n
	return &metapb.Result{}
}

func (f *FSM) deleteTenant(c *metapb.DeleteTenant) *metapb.Result {
	name := c.GetName()
	if _, ok := f.tenants[name]; !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("tenant %q not found", name)}
	}
	if n := f.tenantQueuesLocked(name); n > 0 {
		return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf("tenant %q still has %d queue(s); delete them first", name, n)}
	}
	for _, k := range f.keys {
		if k.GetTenant() == name {
			return &metapb.Result{Code: metapb.Code_CODE_REFUSED, Message: fmt.Sprintf("tenant %q still has API key %s (%s); revoke it first", name, k.GetId(), k.GetName())}
		}
	}
	delete(f.tenants, name)
	return &metapb.Result{}
}

// tenantQueuesLocked counts a tenant's queues.
func (f *FSM) tenantQueuesLocked(tenant string) int {
	n := 0
	for name := range f.queues {
		if fsm.TenantOf(name) == tenant {
			n++
		}
	}
	return n
}

// admitQueue refuses a new queue whose tenant does not exist or is at
// its max_queues; nil for a queue of no tenant.
func (f *FSM) admitQueue(name string) *metapb.Result {
	tn := fsm.TenantOf(name)
	if tn == "" {
		return nil
	}
	t, ok := f.tenants[tn]
	if !ok {
		return &metapb.Result{Code: metapb.Code_CODE_NOT_FOUND, Message: fmt.Sprintf("tenant %q not found; create it first", tn)}
	}
	if lim := t.GetQuotas().GetMaxQueues(); lim > 0 {
		if n := f.tenantQueuesLocked(tn); n >= int(lim) {
			return &metapb.Result{Code: metapb.Code_CODE_QUOTA, Message: fmt.Sprintf("tenant %q has %d queues, its quota max_queues is %d", tn, n, lim)}
		}
	}
	return nil
}

func validateTenant(t *metapb.Tenant) error {
	if err := fsm.ValidateTenantName(t.GetName()); err != nil {
		return fmt.Errorf("%s", fsmReason(err))
	}
	if err := fsm.ValidateQuotas(t.GetQuotas(), true); err != nil {
		return fmt.Errorf("tenant %q: %s", t.GetName(), fsmReason(err))
	}
	return nil
}

// Tenant returns a copy of one tenant from the local replica.
func (f *FSM) Tenant(name string) (*metapb.Tenant, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.tenants[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(t), true
}

// Tenants returns copies of every tenant, sorted by name.
func (f *FSM) Tenants() []*metapb.Tenant {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.tenantsLocked()
}

func (f *FSM) tenantsLocked() []*metapb.Tenant {
	out := make([]*metapb.Tenant, 0, len(f.tenants))
	for _, t := range f.tenants {
		out = append(out, proto.CloneOf(t))
	}
	slices.SortFunc(out, func(a, b *metapb.Tenant) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

// TenantQueues counts a tenant's queues on the local replica.
func (f *FSM) TenantQueues(tenant string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.tenantQueuesLocked(tenant)
}

// shardPolicy is the policy a shard enforces for queue q: the queue's own,
// with its shard_quota set to this shard's share of the queue's quotas and
// of its tenant's, and max_message_bytes lowered to the tenant's cap.
// Every shard gets the same share: a group's messages hash to one shard,
// so a queue whose groups spread evenly fills its shards together, and a
// skewed one is refused early, never late. A paused queue's policy
// carries paused (meta/pause.go).
func shardPolicy(q *metapb.Queue, t *metapb.Tenant, shards uint32) *fsmpb.QueuePolicy {
	p := q.GetPolicy()
	if q.GetPaused() {
		p = proto.CloneOf(p)
		p.Paused = true
	}
	qq, tq := p.GetQuotas(), t.GetQuotas()
	if qq == nil && tq == nil {
		return p
	}
	p = proto.CloneOf(p)
	n := max(shards, 1)
	sq := &fsmpb.ShardQuota{
		MaxMessages:       share(qq.GetMaxMessages(), n),
		MaxBytes:          share(qq.GetMaxBytes(), n),
		MaxInFlight:       share(qq.GetMaxInFlight(), n),
		TenantMaxMessages: share(tq.GetMaxMessages(), n),
		TenantMaxBytes:    share(tq.GetMaxBytes(), n),
		TenantMaxInFlight: share(tq.GetMaxInFlight(), n),
	}
	sq.SendRate, sq.SendBurst = rateShare(qq, n)
	sq.TenantSendRate, sq.TenantSendBurst = rateShare(tq, n)
	sq.TenantWeight = tq.GetWeight()
	if b := tq.GetMaxMessageBytes(); b > 0 && b < p.GetMaxMessageBytes() {
		p.MaxMessageBytes = b
		if lim := p.GetMaxBytesPerShard(); lim > 0 && lim < uint64(b) {
			p.MaxBytesPerShard = uint64(b)
		}
	}
	p.ShardQuota = sq
	return p
}

// share is limit over n shards, rounded up; 0 stays 0 (no limit).
func share(limit uint64, n uint32) uint64 {
	if limit == 0 {
		return 0
	}
	return (limit + uint64(n) - 1) / uint64(n)
}

// rateShare is a shard's token bucket: the rate over n shards and a burst
// of at least one message, so a share below one still sends.
func rateShare(q *fsmpb.Quotas, n uint32) (rate, burst float64) {
	if q.GetSendRate() == 0 {
		return 0, 0
	}
	rate = float64(q.GetSendRate()) / float64(n)
	b := q.GetSendBurst()
	if b == 0 {
		b = q.GetSendRate()
	}
	return rate, math.Max(float64(b)/float64(n), 1)
}

// ShardPolicy returns the policy shards enforce for a queue (shardPolicy),
// from the local replica.
func (s *Store) ShardPolicy(q Queue) *fsmpb.QueuePolicy {
	t, _ := s.fsm.Tenant(fsm.TenantOf(q.Name))
	return shardPolicy(&metapb.Queue{Name: q.Name, Policy: q.Policy, Paused: q.Paused}, t, s.ShardMap().Count)
}

// Tenant returns one tenant from the local replica.
func (s *Store) Tenant(name string) (*metapb.Tenant, bool) { return s.fsm.Tenant(name) }

// Tenants returns every tenant from the local replica, sorted by name.
func (s *Store) Tenants() []*metapb.Tenant { return s.fsm.Tenants() }

// TenantQueues counts a tenant's queues on the local replica.
func (s *Store) TenantQueues(name string) int { return s.fsm.TenantQueues(name) }

// PutTenant creates a tenant (create) or replaces its quotas: ErrExists
// for a create of a tenant that has other quotas, ErrNotFound for an
// update of none.
func (s *Store) PutTenant(ctx context.Context, name string, quotas *fsmpb.Quotas, create bool) (*metapb.Tenant, error) {
	t := &metapb.Tenant{Name: name, Quotas: quotas}
	if err := validateTenant(t); err != nil {
		return nil, fmt.Errorf("put tenant: %w", refused(ErrInvalid, "%v", err))
	}
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_PutTenant{PutTenant: &metapb.PutTenant{Tenant: t, Create: create}}}); err != nil {
		return nil, fmt.Errorf("put tenant %q: %w", name, err)
	}
	got, ok := s.fsm.Tenant(name)
	if !ok {
		// Applied here (apply returns after the local FSM applied it), so
		// only a delete in between can take it away.
		return nil, fmt.Errorf("put tenant %q: %w", name, refused(ErrNotFound, "tenant %q was deleted meanwhile", name))
	}
	return got, nil
}

// DeleteTenant removes a tenant with no queues and no keys left.
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	if _, err := s.apply(ctx, &metapb.Command{Cmd: &metapb.Command_DeleteTenant{DeleteTenant: &metapb.DeleteTenant{Name: name}}}); err != nil {
		return fmt.Errorf("delete tenant %q: %w", name, err)
	}
	return nil
}
