package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/raftgroup"
)

// accessSvc serves raftqv1.Access: API keys and the audit trail. Key
// writes run on the meta leader, where the token is made: it goes back to
// the caller in the answer and only its hash enters the raft log.
type accessSvc struct {
	*Server
	raftqv1.UnimplementedAccessServer
}

const (
	defaultAuditPage = 100
	maxAuditPage     = 1000
)

func forwardAccess[T any](ctx context.Context, s *Server, err error, fn func(context.Context, raftqv1.AccessClient) (T, error)) (T, error) {
	return forwardToMetaLeader(ctx, s, err, func(ctx context.Context, cc *grpc.ClientConn) (T, error) {
		return fn(ctx, raftqv1.NewAccessClient(cc))
	})
}

func (a *accessSvc) WhoAmI(ctx context.Context, _ *raftqv1.WhoAmIRequest) (*raftqv1.WhoAmIResponse, error) {
	p := principalOf(ctx)
	if p == nil {
		p = &Principal{Name: "anonymous", Unrestricted: true}
	}
	return &raftqv1.WhoAmIResponse{Principal: p.Name, Grants: grantsOut(p.Grants), Unrestricted: p.Unrestricted, Tenant: p.Tenant}, nil
}

func grantsOut(gs []*metapb.Grant) []*raftqv1.Grant {
	out := make([]*raftqv1.Grant, len(gs))
	for i, g := range gs {
		out[i] = &raftqv1.Grant{Role: roleName(g.GetRole()), Queues: g.GetQueues()}
	}
	return out
}

func grantsIn(gs []*raftqv1.Grant) ([]*metapb.Grant, error) {
	if len(gs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "a key needs at least one grant, such as producer:orders.* or admin:*")
	}
	out := make([]*metapb.Grant, len(gs))
	for i, g := range gs {
		r, ok := parseRole(g.GetRole())
		if !ok {
			return nil, status.Errorf(codes.InvalidArgument, "grant %d: role %q: want admin, producer, consumer or viewer", i+1, g.GetRole())
		}
		out[i] = &metapb.Grant{Role: r, Queues: g.GetQueues()}
		if err := meta.ValidateGrant(out[i]); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return out, nil
}

func keyInfo(k *metapb.ApiKey) *raftqv1.KeyInfo {
	return &raftqv1.KeyInfo{Id: k.GetId(), Name: k.GetName(), Grants: grantsOut(k.GetGrants()),
		CreatedMs: k.GetCreatedMs(), RotatedMs: k.GetRotatedMs(), CreatedBy: k.GetCreatedBy(), Tenant: k.GetTenant()}
}

func callerName(ctx context.Context) string {
	if p := principalOf(ctx); p != nil {
		return p.Name
	}
	return "anonymous"
}

func (a *accessSvc) CreateKey(ctx context.Context, req *raftqv1.CreateKeyRequest) (*raftqv1.CreateKeyResponse, error) {
	grants, err := grantsIn(req.GetGrants())
	if err != nil {
		return nil, err
	}
	if t := req.GetTenant(); t != "" {
		if err := fsm.ValidateTenantName(t); err != nil {
			return nil, invalidFSM(err)
		}
	}
	m := a.node.Meta()
	if !m.IsLeader() {
		return forwardAccess(ctx, a.Server, &raftgroup.NotLeaderError{Group: "meta", LeaderID: m.LeaderID()},
			func(ctx context.Context, c raftqv1.AccessClient) (*raftqv1.CreateKeyResponse, error) {
				return c.CreateKey(ctx, req)
			})
	}
	id, token, sum, err := newAPIKey()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "make API key: %v", err)
	}
	k := &metapb.ApiKey{Id: id, Name: req.GetName(), SecretSha256: sum[:], Grants: grants, CreatedBy: callerName(ctx), Tenant: req.GetTenant()}
	if err := m.CreateAPIKey(ctx, k); err != nil {
		return nil, a.toStatus(ctx, err)
	}
	if got, ok := m.FSM().APIKey(id); ok {
		k = got
	}
	return &raftqv1.CreateKeyResponse{Key: keyInfo(k), Token: token}, nil
}

// findKey resolves an id or a name against this replica's keys.
func (a *accessSvc) findKey(key string) (*metapb.ApiKey, error) {
	if k, ok := a.node.Meta().FSM().APIKey(key); ok {
		return k, nil
	}
	for _, k := range a.node.Meta().FSM().APIKeys() {
		if k.GetName() == key {
			return k, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "no API key with id or name %q", key)
}

func (a *accessSvc) ListKeys(context.Context, *raftqv1.ListKeysRequest) (*raftqv1.ListKeysResponse, error) {
	keys := a.node.Meta().FSM().APIKeys()
	out := make([]*raftqv1.KeyInfo, len(keys))
	for i, k := range keys {
		out[i] = keyInfo(k)
	}
	return &raftqv1.ListKeysResponse{Keys: out}, nil
}

func (a *accessSvc) RotateKey(ctx context.Context, req *raftqv1.RotateKeyRequest) (*raftqv1.CreateKeyResponse, error) {
	m := a.node.Meta()
	if !m.IsLeader() {
		return forwardAccess(ctx, a.Server, &raftgroup.NotLeaderError{Group: "meta", LeaderID: m.LeaderID()},
			func(ctx context.Context, c raftqv1.AccessClient) (*raftqv1.CreateKeyResponse, error) {
				return c.RotateKey(ctx, req)
			})
	}
	k, err := a.findKey(req.GetKey())
	if err != nil {
		return nil, err
	}
	// The token keeps its id, so listings and audit lines follow the key
	// across rotations; only the secret changes.
	_, token, sum, err := newAPIKey()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "make API key: %v", err)
	}
	id, rest := k.GetId(), token[len(tokenPrefix)+16:]
	if err := m.RotateAPIKey(ctx, id, sum[:]); err != nil {
		return nil, a.toStatus(ctx, err)
	}
	if got, ok := m.FSM().APIKey(id); ok {
		k = got
	}
	return &raftqv1.CreateKeyResponse{Key: keyInfo(k), Token: tokenPrefix + id + rest}, nil
}

func (a *accessSvc) RevokeKey(ctx context.Context, req *raftqv1.RevokeKeyRequest) (*raftqv1.RevokeKeyResponse, error) {
	m := a.node.Meta()
	if !m.IsLeader() {
		return forwardAccess(ctx, a.Server, &raftgroup.NotLeaderError{Group: "meta", LeaderID: m.LeaderID()},
			func(ctx context.Context, c raftqv1.AccessClient) (*raftqv1.RevokeKeyResponse, error) {
				return c.RevokeKey(ctx, req)
			})
	}
	k, err := a.findKey(req.GetKey())
	if err != nil {
		return nil, err
	}
	if err := m.RevokeAPIKey(ctx, k.GetId()); err != nil {
		return nil, a.toStatus(ctx, err)
	}
	return &raftqv1.RevokeKeyResponse{}, nil
}

func (a *accessSvc) ListAudit(_ context.Context, req *raftqv1.ListAuditRequest) (*raftqv1.ListAuditResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultAuditPage
	case limit > maxAuditPage:
		return nil, status.Errorf(codes.InvalidArgument, "limit %d: at most %d records a page", limit, maxAuditPage)
	}
	recs := a.node.Meta().FSM().Audit(req.GetAfterSeq(), limit)
	out := make([]*raftqv1.AuditRecord, len(recs))
	for i, r := range recs {
		out[i] = &raftqv1.AuditRecord{Seq: r.GetSeq(), AtMs: r.GetAtMs(), Node: r.GetNode(), Caller: r.GetCaller(),
			Method: r.GetMethod(), Request: r.GetRequest(), Code: r.GetCode(), Error: r.GetError()}
	}
	return &raftqv1.ListAuditResponse{Records: out}, nil
}

// StoreAudit keeps one audit record in the meta group's trail, through
// the meta leader's peer port when this node does not lead it.
func (s *Server) StoreAudit(ctx context.Context, r *metapb.AuditRecord) error {
	m := s.node.Meta()
	err := m.AppendAudit(ctx, r)
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) {
		return err
	}
	if nl.LeaderID == "" {
		return fmt.Errorf("store audit record: %w", err)
	}
	addr, ok := s.node.MemberPeer(nl.LeaderID)
	if !ok {
		return fmt.Errorf("store audit record: no peer address for meta leader %s", nl.LeaderID)
	}
	cc, err := s.router.Conn(addr)
	if err != nil {
		return fmt.Errorf("store audit record: dial meta leader %s: %w", nl.LeaderID, err)
	}
	if _, err := peerpb.NewPeerClient(cc).MetaAudit(ctx, &peerpb.MetaAuditRequest{Record: r}); err != nil {
		return fmt.Errorf("store audit record at meta leader %s: %w", nl.LeaderID, err)
	}
	return nil
}
