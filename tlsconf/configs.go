package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// ALPN protocol ids: gRPC requires "h2"; the raft port names its own so a
// gRPC client pointed at it fails the handshake instead of hanging.
var (
	ALPNGRPC = []string{"h2"}
	ALPNRaft = []string{"raftq-raft"}
)

// ClientPort is the configuration of the client gRPC listener. Clients
// check the node by name (the DNS and IP SANs of its certificate). A client
// certificate is optional and, when presented, must chain to the CA.
func (s *Store) ClientPort() *tls.Config {
	return s.server(ALPNGRPC, tls.VerifyClientCertIfGiven, "")
}

// Members is the configuration of a listener only cluster members may use
// (the peer gRPC port, the raft port): the caller must present a node
// certificate that chains to the CA.
func (s *Store) Members(alpn []string) *tls.Config {
	return s.server(alpn, tls.RequireAndVerifyClientCert, RoleNode)
}

func (s *Store) server(alpn []string, auth tls.ClientAuthType, role Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: alpn,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   alpn,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   auth,
				ClientCAs:    m.pool,
			}
			if role != "" {
				// Members reconnect often enough; no session to resume
				// means every connection shows its certificate.
				c.SessionTicketsDisabled = true
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					// Belt and braces: ClientAuth above verified the chain.
					if len(cs.VerifiedChains) == 0 {
						return errors.New("raftq: no verified certificate chain: this port takes cluster members only")
					}
					return requireRole(cs, role, "")
				}
			}
			return c, nil
		},
	}
}

// Dialer is the configuration a node dials another node with (peer port,
// client port, raft port): it presents its node certificate and accepts
// only a node certificate from the CA. Nodes are checked by identity, not
// by host name: a node's addresses change, its id does not. expect, if not
// empty, is the node id the far end must prove.
func (s *Store) Dialer(alpn []string, expect string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: alpn,
		// The chain and the identity are checked in VerifyConnection against
		// the CA current at handshake time (Reload may change it); the
		// standard check would pin the pool and a host name.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				raw[i] = c.Raw
			}
			if _, err := verifyChain(raw, s.cur.Load().pool, x509.ExtKeyUsageServerAuth); err != nil {
				return fmt.Errorf("raftq: the far end's certificate is not from this cluster's CA: %w", err)
			}
			return requireRole(cs, RoleNode, expect)
		},
	}
}

// requireRole checks the identity of the far end's (already verified)
// certificate.
func requireRole(cs tls.ConnectionState, role Role, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raftq: no certificate presented: this port takes cluster members only")
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return fmt.Errorf("raftq: %w", err)
	}
	if id.Role != role {
		return fmt.Errorf("raftq: certificate of %s: this port takes %s certificates only", id, role)
	}
	if name != "" && id.Name != name {
		return fmt.Errorf("raftq: certificate of %s where node %q was expected", id, name)
	}
	return nil
}

// ClientFiles configures a client (CLI, SDK, bench): the CA that signed the
// nodes' certificates and, optionally, a client certificate and key.
func ClientFiles(ca, cert, key string) (*tls.Config, error) {
	if ca == "" {
		return nil, errors.New("tls: a CA file is required to check the nodes")
	}
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", ca)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	switch {
	case cert != "" && key != "":
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("tls: load certificate %s and key %s: %w", cert, key, err)
		}
		c.Certificates = []tls.Certificate{kp}
	case cert != "" || key != "":
		return nil, errors.New("tls: a client certificate needs both its certificate and its key file")
	}
	return c, nil
}

// PeerIdentity reads the verified identity of a TLS connection's far end;
// ok is false when it presented no certificate.
func PeerIdentity(cs tls.ConnectionState) (Identity, bool) {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return Identity{}, false
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	return id, err == nil
}

// PeerCredentials are the gRPC credentials a node dials other nodes with
// (Dialer, any member).
func (s *Store) PeerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(s.Dialer(ALPNGRPC, ""))
}
