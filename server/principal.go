package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/tlsconf"
)

// Principal is who a call comes from and what it may do.
type Principal struct {
	// Name: key/NAME, client/NAME, node/ID or anonymous.
	Name string
	// Unrestricted: a member node (nodes forward control-plane calls to
	// the meta leader on each other's client ports) or, on a node that
	// does not require credentials, an anonymous caller.
	Unrestricted bool
	Grants       []*metapb.Grant
	// Tenant: the tenant the principal acts in ("" for none). Its grants
	// name the tenant's queues without the "TENANT/" prefix, and it
	// reaches no queue outside the tenant (grants.go).
	Tenant string
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// principalOf is the principal the access interceptor (access.go) found
// for the call; nil where no interceptor ran (tests of handlers alone).
func principalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// certificateIdentity is who the verified certificate of the call's TLS
// connection names, with its grants; ok is false without one (or in
// plaintext).
func certificateIdentity(ctx context.Context) (tlsconf.Identity, []tlsconf.Grant, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsconf.Identity{}, nil, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tlsconf.Identity{}, nil, false
	}
	id, ok := tlsconf.PeerIdentity(info.State)
	if !ok {
		return tlsconf.Identity{}, nil, false
	}
	return id, tlsconf.GrantsOf(info.State.PeerCertificates[0]), true
}

// adminClient is the client certificate name that, issued without grants,
// is an admin of every queue: raftq certs dev makes it for make run and
// compose, so the CLI run from the repository works as it did before
// grants existed. Any other certificate without grants may only ask who
// it is.
const adminClient = "admin"

// bearerToken is the API key of the call's "authorization: Bearer ..."
// metadata, if any.
func bearerToken(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", false
	}
	if t, ok := strings.CutPrefix(vals[0], "Bearer "); ok {
		return strings.TrimSpace(t), true
	}
	return vals[0], true
}

// authenticate finds the principal of a call: its API key if it sends
// one (a key given and refused fails the call, even over a certificate),
// else its certificate, else anonymous (nil: the caller decides).
func (s *Server) authenticate(ctx context.Context) (*Principal, error) {
	if token, ok := bearerToken(ctx); ok {
		id, sum, err := parseToken(token)
		if err != nil {
			return nil, errUnauthenticated(err.Error())
		}
		k, ok := s.node.Meta().FSM().APIKey(id)
		if !ok || subtle.ConstantTimeCompare(k.GetSecretSha256(), sum[:]) != 1 {
			return nil, errUnauthenticated(fmt.Sprintf("API key rqk_%s is not valid on this cluster: revoked, rotated, or never created here", id))
		}
		return &Principal{Name: "key/" + k.GetName(), Grants: k.GetGrants(), Tenant: k.GetTenant()}, nil
	}
	id, certGrants, ok := certificateIdentity(ctx)
	if !ok {
		return nil, nil
	}
	p := &Principal{Name: id.String()}
	switch {
	case id.Role == tlsconf.RoleNode:
		p.Unrestricted = true
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(onBehalfKey)) > 0 {
			// A control-plane call forwarded by a member: name who made it.
			p.Name = md.Get(onBehalfKey)[0] + " via " + p.Name
		}
	case len(certGrants) == 0 && id.Name == adminClient:
		p.Grants = []*metapb.Grant{{Role: metapb.Role_ROLE_ADMIN, Queues: "*"}}
	default:
		for _, g := range certGrants {
			if r, ok := parseRole(g.Role); ok {
				p.Grants = append(p.Grants, &metapb.Grant{Role: r, Queues: g.Queues})
			}
		}
	}
	return p, nil
}
