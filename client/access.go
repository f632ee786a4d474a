package client

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Grant is one role (admin, producer, consumer or viewer) on the queues
// Queues matches: a name, a prefix ending in '*', or "*".
type Grant struct {
	Role   string
	Queues string
}

func (g Grant) String() string { return g.Role + ":" + g.Queues }

// KeyInfo describes an API key; its secret is never listed.
type KeyInfo struct {
	ID, Name  string
	Grants    []Grant
	Created   time.Time
	Rotated   time.Time // zero: never rotated
	CreatedBy string
	// Tenant: the tenant the key acts in; its grants name the tenant's
	// queues without the "TENANT/" prefix. "" for none.
	Tenant string
}

// Principal is who a node takes the caller for (WhoAmI).
type Principal struct {
	Name   string
	Grants []Grant
	// Unrestricted: a member node, or anonymous on a node that lets
	// callers without credentials do everything.
	Unrestricted bool
	Tenant       string // the tenant it acts in; "" for none
}

// AuditRecord is one administrative call of the audit trail.
type AuditRecord struct {
	Seq                           uint64
	At                            time.Time
	Node, Caller, Method, Request string
	Code, Error                   string
}

func grantsFrom(gs []*raftqv1.Grant) []Grant {
	out := make([]Grant, len(gs))
	for i, g := range gs {
		out[i] = Grant{Role: g.GetRole(), Queues: g.GetQueues()}
	}
	return out
}

func keyFrom(k *raftqv1.KeyInfo) KeyInfo {
	ki := KeyInfo{ID: k.GetId(), Name: k.GetName(), Grants: grantsFrom(k.GetGrants()), Created: time.UnixMilli(k.GetCreatedMs()), CreatedBy: k.GetCreatedBy(), Tenant: k.GetTenant()}
	if k.GetRotatedMs() != 0 {
		ki.Rotated = time.UnixMilli(k.GetRotatedMs())
	}
	return ki
}

func (c *Client) access(ctx context.Context, safe bool, call func(context.Context, raftqv1.AccessClient, ...grpc.CallOption) error) error {
	return c.invoke(ctx, callSpec{shard: anyShard, safe: safe}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		return call(ctx, raftqv1.NewAccessClient(cc), co...)
	})
}

// WhoAmI asks a node who it takes this client for.
func (c *Client) WhoAmI(ctx context.Context) (Principal, error) {
	var resp *raftqv1.WhoAmIResponse
	err := c.access(ctx, true, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) (err error) {
		resp, err = a.WhoAmI(ctx, &raftqv1.WhoAmIRequest{}, co...)
		return err
	})
	if err != nil {
		return Principal{}, fmt.Errorf("who am I: %w", err)
	}
	return Principal{Name: resp.GetPrincipal(), Grants: grantsFrom(resp.GetGrants()), Unrestricted: resp.GetUnrestricted(), Tenant: resp.GetTenant()}, nil
}

// CreateKey makes an API key named name with grants and returns it with
// its token, which nothing can show again. Not retried after an unknown
// outcome: a retry would meet the name taken (ErrExists).
func (c *Client) CreateKey(ctx context.Context, name string, grants ...Grant) (KeyInfo, string, error) {
	return c.CreateTenantKey(ctx, "", name, grants...)
}

// CreateTenantKey is CreateKey for a key that acts in tenant: its grants
// name the tenant's queues without the "TENANT/" prefix, and it reaches
// no other queue.
func (c *Client) CreateTenantKey(ctx context.Context, tenant, name string, grants ...Grant) (KeyInfo, string, error) {
	req := &raftqv1.CreateKeyRequest{Name: name, Tenant: tenant}
	for _, g := range grants {
		req.Grants = append(req.Grants, &raftqv1.Grant{Role: g.Role, Queues: g.Queues})
	}
	var resp *raftqv1.CreateKeyResponse
	err := c.access(ctx, false, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) (err error) {
		resp, err = a.CreateKey(ctx, req, co...)
		return err
	})
	if err != nil {
		return KeyInfo{}, "", fmt.Errorf("create key %q: %w", name, err)
	}
	return keyFrom(resp.GetKey()), resp.GetToken(), nil
}

// ListKeys lists the cluster's API keys.
func (c *Client) ListKeys(ctx context.Context) ([]KeyInfo, error) {
	var resp *raftqv1.ListKeysResponse
	err := c.access(ctx, true, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) (err error) {
		resp, err = a.ListKeys(ctx, &raftqv1.ListKeysRequest{}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	out := make([]KeyInfo, len(resp.GetKeys()))
	for i, k := range resp.GetKeys() {
		out[i] = keyFrom(k)
	}
	return out, nil
}

// RotateKey gives key (an id or a name) a new secret and returns its new
// token; the old token stops working.
func (c *Client) RotateKey(ctx context.Context, key string) (KeyInfo, string, error) {
	var resp *raftqv1.CreateKeyResponse
	err := c.access(ctx, false, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) (err error) {
		resp, err = a.RotateKey(ctx, &raftqv1.RotateKeyRequest{Key: key}, co...)
		return err
	})
	if err != nil {
		return KeyInfo{}, "", fmt.Errorf("rotate key %q: %w", key, err)
	}
	return keyFrom(resp.GetKey()), resp.GetToken(), nil
}

// RevokeKey deletes key (an id or a name); its token stops working.
func (c *Client) RevokeKey(ctx context.Context, key string) error {
	err := c.access(ctx, true, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) error {
		_, err := a.RevokeKey(ctx, &raftqv1.RevokeKeyRequest{Key: key}, co...)
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke key %q: %w", key, err)
	}
	return nil
}

// ListAudit returns up to limit (0: 100, at most 1000) audit records
// after seq afterSeq, oldest first.
func (c *Client) ListAudit(ctx context.Context, afterSeq uint64, limit int) ([]AuditRecord, error) {
	if limit < 0 || limit > 1000 {
		return nil, fmt.Errorf("list audit: %w", invalid(fmt.Sprintf("limit %d outside 0-1000", limit)))
	}
	var resp *raftqv1.ListAuditResponse
	err := c.access(ctx, true, func(ctx context.Context, a raftqv1.AccessClient, co ...grpc.CallOption) (err error) {
		resp, err = a.ListAudit(ctx, &raftqv1.ListAuditRequest{AfterSeq: afterSeq, Limit: uint32(limit)}, co...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out := make([]AuditRecord, len(resp.GetRecords()))
	for i, r := range resp.GetRecords() {
		out[i] = AuditRecord{Seq: r.GetSeq(), At: time.UnixMilli(r.GetAtMs()), Node: r.GetNode(), Caller: r.GetCaller(),
			Method: r.GetMethod(), Request: r.GetRequest(), Code: r.GetCode(), Error: r.GetError()}
	}
	return out, nil
}
