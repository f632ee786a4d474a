package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Quotas cap a queue or a tenant over the whole cluster (docs/tenancy.md);
// 0 = no limit. Past one, calls fail with ErrExhausted and a retry hint
// the client honours.
type Quotas struct {
	SendRate    uint32 // messages per second, a token bucket
	SendBurst   uint32 // the bucket's size; 0 = SendRate
	MaxMessages uint64 // live: ready, delayed, leased
	MaxBytes    uint64 // sum of live bodies
	MaxInFlight uint64 // leased
	// A tenant's only.
	MaxQueues       uint32
	MaxMessageBytes uint32
	// Weight: the tenant's share of each shard's sends against other
	// tenants' while both wait; 0 = 1.
	Weight uint32
}

func (q Quotas) proto() *raftqv1.Quotas {
	if q == (Quotas{}) {
		return nil
	}
	return &raftqv1.Quotas{SendRate: q.SendRate, SendBurst: q.SendBurst, MaxMessages: q.MaxMessages, MaxBytes: q.MaxBytes,
		MaxInFlight: q.MaxInFlight, MaxQueues: q.MaxQueues, MaxMessageBytes: q.MaxMessageBytes, Weight: q.Weight}
}

func quotasFrom(q *raftqv1.Quotas) Quotas {
	return Quotas{SendRate: q.GetSendRate(), SendBurst: q.GetSendBurst(), MaxMessages: q.GetMaxMessages(), MaxBytes: q.GetMaxBytes(),
		MaxInFlight: q.GetMaxInFlight(), MaxQueues: q.GetMaxQueues(), MaxMessageBytes: q.GetMaxMessageBytes(), Weight: q.GetWeight()}
}

// Tenant is one tenant: its queues are named "NAME/QUEUE". The usage
// fields are filled in by GetTenant only.
type Tenant struct {
	Name             string
	Quotas           Quotas
	Created, Updated time.Time
	Queues           uint32
	Messages         uint64 // live
	LiveBytes        uint64
	InFlight         uint64
}

func tenantFrom(t *raftqv1.TenantInfo) Tenant {
	return Tenant{Name: t.GetName(), Quotas: quotasFrom(t.GetQuotas()), Created: unixMs(t.GetCreatedMs()), Updated: unixMs(t.GetUpdatedMs()),
		Queues: t.GetQueues(), Messages: t.GetMessages(), LiveBytes: t.GetLiveBytes(), InFlight: t.GetInFlight()}
}

func (c *Client) tenants(ctx context.Context, safe bool, call func(context.Context, raftqv1.TenantsClient, ...grpc.CallOption) error) error {
	return c.invoke(ctx, callSpec{shard: anyShard, safe: safe}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		return call(ctx, raftqv1.NewTenantsClient(cc), co...)
	})
}

// CreateTenant creates a tenant; creating it again with the same quotas
// returns it (so a retry is safe), with other quotas fails with
// ErrExists.
func (c *Client) CreateTenant(ctx context.Context, name string, q Quotas) (Tenant, error) {
	var resp *raftqv1.TenantInfo
	err := c.tenants(ctx, true, func(ctx context.Context, t raftqv1.TenantsClient, co ...grpc.CallOption) (err error) {
		resp, err = t.CreateTenant(ctx, &raftqv1.CreateTenantRequest{Name: name, Quotas: q.proto()}, co...)
		return err
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("create tenant %q: %w", name, err)
	}
	return tenantFrom(resp), nil
}

// UpdateTenant replaces a tenant's quotas.
func (c *Client) UpdateTenant(ctx context.Context, name string, q Quotas) (Tenant, error) {
	var resp *raftqv1.TenantInfo
	err := c.tenants(ctx, true, func(ctx context.Context, t raftqv1.TenantsClient, co ...grpc.CallOption) (err error) {
		resp, err = t.UpdateTenant(ctx, &raftqv1.UpdateTenantRequest{Name: name, Quotas: q.proto()}, co...)
		return err
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("update tenant %q: %w", name, err)
	}
	return tenantFrom(resp), nil
}

// GetTenant returns a tenant with its usage over every shard. A tenant's
// own key may pass "" for its tenant.
func (c *Client) GetTenant(ctx context.Context, name string) (Tenant, error) {
	var resp *raftqv1.TenantInfo
	err := c.tenants(ctx, true, func(ctx context.Context, t raftqv1.TenantsClient, co ...grpc.CallOption) (err error) {
		resp, err = t.GetTenant(ctx, &raftqv1.GetTenantRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return Tenant{}, fmt.Errorf("get tenant %q: %w", name, err)
	}
	return tenantFrom(resp), nil
}

// ListTenants lists the cluster's tenants by name, without usage.
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	var resp *raftqv1.ListTenantsResponse
	err := c.tenants(ctx, true, func(ctx context.Context, t raftqv1.TenantsClient, co ...grpc.CallOption) (err error) {
		resp, err = t.ListTenants(ctx, &raftqv1.ListTenantsRequest{}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out := make([]Tenant, len(resp.GetTenants()))
	for i, t := range resp.GetTenants() {
		out[i] = tenantFrom(t)
	}
	return out, nil
}

// DeleteTenant removes a tenant with no queues and no API keys left.
func (c *Client) DeleteTenant(ctx context.Context, name string) error {
	err := c.tenants(ctx, false, func(ctx context.Context, t raftqv1.TenantsClient, co ...grpc.CallOption) error {
		_, err := t.DeleteTenant(ctx, &raftqv1.DeleteTenantRequest{Name: name}, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete tenant %q: %w", name, err)
	}
	return nil
}
