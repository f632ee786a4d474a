package nodes

import (
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/tlsconf"
)

// certValid outlasts any run.
const certValid = 7 * 24 * time.Hour

// harnessID is the member identity the harness dials the peer ports with
// (replica digests, Known): a member's certificate, no node behind it.
const harnessID = "jepsen-harness"

// clientName is the client certificate the harness's clients present: the
// nodes run --client-auth require (the default with TLS), so every call of
// the run is authenticated and authorized by the grant it carries. The
// nemeses grow the shard count and replace nodes, which needs admin:*.
const clientName = "jepsen"

// initCerts makes the run's CA and gossip key under its directory and
// returns the credentials of the harness's clients (the CA and a client
// certificate) and of its peer-port calls (a member certificate).
func (c *Cluster) initCerts() (client, member credentials.TransportCredentials, err error) {
	if c.certs, err = tlsconf.InitDir(filepath.Join(c.dir, "certs"), certValid); err != nil {
		return nil, nil, fmt.Errorf("certs: %w", err)
	}
	cf, err := c.certs.IssueClient(clientName, certValid, tlsconf.Grant{Role: "admin", Queues: "*"})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := tlsconf.ClientFiles(cf.CA, cf.Cert, cf.Key)
	if err != nil {
		return nil, nil, err
	}
	f, err := c.certs.IssueNode(harnessID, nil, certValid)
	if err != nil {
		return nil, nil, err
	}
	st, err := tlsconf.Load(f)
	if err != nil {
		return nil, nil, err
	}
	return credentials.NewTLS(cfg), st.PeerCredentials(), nil
}

// nodeTLS is node n's security flags; its certificate names its address,
// which the harness's clients dial.
func (c *Cluster) nodeTLS(n *Node) ([]string, error) {
	f, _, err := c.certs.EnsureNode(n.ID, []string{n.IP}, certValid)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", n.ID, err)
	}
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "--gossip-key-file", c.certs.GossipKeyFile()}, nil
}

// ClientCreds are the credentials a client of the run's nodes dials with
// (the run's CA and the harness's client certificate), e.g.
// client.WithTLS(c.ClientCreds()).
func (c *Cluster) ClientCreds() credentials.TransportCredentials { return c.creds }
