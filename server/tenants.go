package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
)

// tenantsSvc serves the Tenants API (docs/tenancy.md). Tenants live in
// meta; their quotas reach the shards inside each of their queues'
// policies (meta.Store.ShardPolicy), pushed here and by the shards'
// reconciliation.
type tenantsSvc struct {
	*Server
	raftqv1.UnimplementedTenantsServer
}

func forwardTenants[T any](ctx context.Context, s *Server, err error, fn func(context.Context, raftqv1.TenantsClient) (T, error)) (T, error) {
	return forwardToMetaLeader(ctx, s, err, func(ctx context.Context, cc *grpc.ClientConn) (T, error) {
		return fn(ctx, raftqv1.NewTenantsClient(cc))
	})
}

func tenantInfo(t *metapb.Tenant) *raftqv1.TenantInfo {
	return &raftqv1.TenantInfo{Name: t.GetName(), Quotas: quotasFromFSM(t.GetQuotas()), CreatedMs: t.GetCreatedMs(), UpdatedMs: t.GetUpdatedMs()}
}

func validTenant(name string, q *raftqv1.Quotas) error {
	if err := fsm.ValidateTenantName(name); err != nil {
		return invalidFSM(err)
	}
	if err := fsm.ValidateQuotas(quotasToFSM(q), true); err != nil {
		return invalidFSM(err)
	}
	return nil
}

func (t *tenantsSvc) CreateTenant(ctx context.Context, req *raftqv1.CreateTenantRequest) (*raftqv1.TenantInfo, error) {
	if err := validTenant(req.GetName(), req.GetQuotas()); err != nil {
		return nil, err
	}
	got, err := t.node.Meta().PutTenant(ctx, req.GetName(), quotasToFSM(req.GetQuotas()), true)
	if err != nil {
		return forwardTenants(ctx, t.Server, err, func(ctx context.Context, c raftqv1.TenantsClient) (*raftqv1.TenantInfo, error) {
			return c.CreateTenant(ctx, req)
		})
	}
	return tenantInfo(got), nil
}

func (t *tenantsSvc) UpdateTenant(ctx context.Context, req *raftqv1.UpdateTenantRequest) (*raftqv1.TenantInfo, error) {
	if err := validTenant(req.GetName(), req.GetQuotas()); err != nil {
		return nil, err
	}
	got, err := t.node.Meta().PutTenant(ctx, req.GetName(), quotasToFSM(req.GetQuotas()), false)
	if err != nil {
		return forwardTenants(ctx, t.Server, err, func(ctx context.Context, c raftqv1.TenantsClient) (*raftqv1.TenantInfo, error) {
			return c.UpdateTenant(ctx, req)
		})
	}
	// The new shares reach every shard before the answer, as a queue's
	// policy does on UpdateQueue; reconciliation finishes what this
	// leaves undone.
	for _, q := range t.node.Meta().Queues() {
		if fsm.TenantOf(q.Name) != req.GetName() {
			continue
		}
		if _, err := t.router.ApplyAll(ctx, t.upsertCmd(q)); err != nil {
			return nil, status.Errorf(codes.Unavailable, "tenant %q updated, shards not all updated yet (retry is safe): %v", req.GetName(), err)
		}
	}
	return tenantInfo(got), nil
}

func (t *tenantsSvc) DeleteTenant(ctx context.Context, req *raftqv1.DeleteTenantRequest) (*raftqv1.DeleteTenantResponse, error) {
	if err := fsm.ValidateTenantName(req.GetName()); err != nil {
		return nil, invalidFSM(err)
	}
	if err := t.node.Meta().DeleteTenant(ctx, req.GetName()); err != nil {
		return forwardTenants(ctx, t.Server, err, func(ctx context.Context, c raftqv1.TenantsClient) (*raftqv1.DeleteTenantResponse, error) {
			return c.DeleteTenant(ctx, req)
		})
	}
	return &raftqv1.DeleteTenantResponse{}, nil
}

func (t *tenantsSvc) ListTenants(context.Context, *raftqv1.ListTenantsRequest) (*raftqv1.ListTenantsResponse, error) {
	ts := t.node.Meta().Tenants()
	out := &raftqv1.ListTenantsResponse{Tenants: make([]*raftqv1.TenantInfo, len(ts))}
	for i, x := range ts {
		out.Tenants[i] = tenantInfo(x)
	}
	return out, nil
}

// GetTenant answers the cluster's admins and the tenant's own principals,
// with the tenant's usage summed over every shard.
func (t *tenantsSvc) GetTenant(ctx context.Context, req *raftqv1.GetTenantRequest) (*raftqv1.TenantInfo, error) {
	name := req.GetName()
	if p := principalOf(ctx); p != nil && p.Tenant != "" && name == "" {
		name = p.Tenant
	}
	if err := fsm.ValidateTenantName(name); err != nil {
		return nil, invalidFSM(err)
	}
	if p := principalOf(ctx); p != nil && p.Tenant != name && !p.Allows(permCluster, "") {
		return nil, denied(p, "/raftq.v1.Tenants/GetTenant", permCluster, "")
	}
	if err := t.ready(ctx); err != nil {
		return nil, err
	}
	x, ok := t.node.Meta().Tenant(name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tenant %q not found", name)
	}
	plan, err := t.router.PlanShards()
	if err != nil {
		return nil, t.toStatus(ctx, err)
	}
	answers := router.Scatter(ctx, plan, func(ctx context.Context, p router.Part) (*peerpb.ShardReadResponse, error) {
		return t.router.Read(ctx, &peerpb.ShardReadRequest{ShardId: p.Shard, Query: &peerpb.ShardReadRequest_TenantUsage{TenantUsage: name}})
	})
	out := tenantInfo(x)
	out.Queues = uint32(t.node.Meta().TenantQueues(name))
	for _, a := range answers {
		if a.Err != nil {
			return nil, t.toStatus(ctx, fmt.Errorf("usage on shard %d: %w", a.Shard, a.Err))
		}
		u := a.Value.GetTenantUsage()
		out.Messages += u.GetLive()
		out.LiveBytes += u.GetLiveBytes()
		out.InFlight += u.GetInFlight()
	}
	return out, nil
}
