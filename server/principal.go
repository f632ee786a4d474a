package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/tlsconf"
)

// principal is who a call comes from, as the verified client certificate
// of its TLS connection names it; ok is false without one (or in
// plaintext).
func principal(ctx context.Context) (tlsconf.Identity, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tlsconf.Identity{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tlsconf.Identity{}, false
	}
	return tlsconf.PeerIdentity(info.State)
}

// errNoCertificate is the answer to a call without a client certificate
// on a node run with --client-auth require.
var errNoCertificate = status.Error(codes.Unauthenticated,
	"raftq: this node requires a client certificate (--client-auth require): pass --cert and --key to the CLI, "+
		"a tls.Config with Certificates to client.WithTLS (raftq certs client NAME makes one)")

// openMethod: health checks answer anyone, so load balancers and probes
// need no certificate.
func openMethod(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// RequireCertificate returns the interceptors of a client port that takes
// calls only from holders of a certificate of the cluster's CA (a client's
// or a member's); the TLS handshake has verified any certificate given, so
// only its presence is checked here, where the refusal can say why.
func RequireCertificate() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if _, ok := principal(ctx); !ok && !openMethod(info.FullMethod) {
				return nil, errNoCertificate
			}
			return handler(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if _, ok := principal(ss.Context()); !ok && !openMethod(info.FullMethod) {
				return errNoCertificate
			}
			return handler(srv, ss)
		}
}
