package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/tlsconf"
)

// BenchmarkAuthorize is what the access interceptor adds to every call:
// finding the principal (an API key checked against the meta replica, or
// a client certificate's grants) and matching the method's rule.
func BenchmarkAuthorize(b *testing.B) {
	ms := leadingMeta(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ms.RecordNodeFormat(ctx, "n2", fsm.LogFormat); err != nil {
		b.Fatal(err)
	}
	id, token, sum, err := newAPIKey()
	if err != nil {
		b.Fatal(err)
	}
	if err := ms.CreateAPIKey(ctx, &metapb.ApiKey{Id: id, Name: "bench", SecretSha256: sum[:],
		Grants: []*metapb.Grant{{Role: metapb.Role_ROLE_PRODUCER, Queues: "orders.*"}}}); err != nil {
		b.Fatal(err)
	}
	s := New(&startingNode{meta: ms}, nil, nil, nil)
	req := &raftqv1.SendRequest{Queue: "orders.eu"}
	const method = "/raftq.v1.Messages/Send"
	run := func(b *testing.B, ctx context.Context) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.authorize(ctx, method, req, true); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("api-key", func(b *testing.B) {
		run(b, metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token)))
	})
	b.Run("certificate", func(b *testing.B) {
		run(b, certContext(b, tlsconf.Grant{Role: "producer", Queues: "orders.*"}))
	})
}

// certContext is a call's context as gRPC makes it for a TLS connection
// that presented a client certificate with grants.
func certContext(b *testing.B, grants ...tlsconf.Grant) context.Context {
	ca, err := tlsconf.NewCA("bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	certPEM, _, err := ca.Issue(tlsconf.Request{Identity: tlsconf.Identity{Role: tlsconf.RoleClient, Name: "app"}, ValidFor: time.Hour, Grants: grants})
	if err != nil {
		b.Fatal(err)
	}
	blk, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	info := credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: info})
}
