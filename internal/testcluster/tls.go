package testcluster

import (
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/raftq/raftq/tlsconf"
)

// pki is a test cluster's CA, gossip key and certificates, under its temp
// directory.
type pki struct {
	dir    *tlsconf.Dir
	member *tlsconf.Store // a node certificate the test itself dials with
}

// memberName is the identity of the test's own node certificate: a member
// of the cluster that runs no node, so tests can call the peer service.
const memberName = "test-harness"

// certValid is how long test certificates are good for.
const certValid = 24 * time.Hour

// testHosts are the names test certificates are good for.
var testHosts = []string{"127.0.0.1", "localhost"}

func newPKI(t testing.TB, path string) *pki {
	t.Helper()
	d, err := tlsconf.InitDir(path, certValid)
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.IssueNode(memberName, testHosts, certValid)
	if err != nil {
		t.Fatal(err)
	}
	member, err := tlsconf.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return &pki{dir: d, member: member}
}

// securityEnv is what node id's process gets in its environment: its TLS
// files, or --insecure.
func (c *Cluster) securityEnv(id string) []string {
	if c.pki == nil {
		return []string{"RAFTQ_INSECURE=true"}
	}
	f := c.NodeFiles(id)
	return []string{"RAFTQ_TLS_CA=" + f.CA, "RAFTQ_TLS_CERT=" + f.Cert, "RAFTQ_TLS_KEY=" + f.Key, "RAFTQ_GOSSIP_KEY_FILE=" + c.pki.dir.GossipKeyFile()}
}

// NodeFiles are node id's TLS files, issued on first use; a test may
// issue them again (a rotation) and SIGHUP the node.
func (c *Cluster) NodeFiles(id string) tlsconf.Files {
	c.t.Helper()
	f, _, err := c.pki.dir.EnsureNode(id, testHosts, certValid)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

// PKI is the cluster's certificate directory (nil without TLS).
func (c *Cluster) PKI() *tlsconf.Dir {
	if c.pki == nil {
		return nil
	}
	return c.pki.dir
}

// MemberCreds are the credentials of a cluster member (a node
// certificate): they pass on every port. Plaintext without TLS.
func (c *Cluster) MemberCreds() credentials.TransportCredentials {
	if c.pki == nil {
		return insecure.NewCredentials()
	}
	return c.pki.member.PeerCredentials()
}

// ClientCreds are what an operator of the cluster dials with: the CA and
// the admin client certificate (admin of every queue; the nodes run
// --client-auth require, the default with TLS). Plaintext without TLS.
func (c *Cluster) ClientCreds() credentials.TransportCredentials {
	c.t.Helper()
	if c.pki == nil {
		return insecure.NewCredentials()
	}
	f, _, err := c.pki.dir.EnsureClient("admin", certValid)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.credsOf(f.Cert, f.Key)
}

// AnonymousCreds trust the cluster's CA and present no certificate: a
// client that authenticates with an API key, or not at all.
func (c *Cluster) AnonymousCreds() credentials.TransportCredentials {
	c.t.Helper()
	return c.credsOf("", "")
}

// ClientCertCreds are a client's credentials with a client certificate
// for name from the cluster's CA, carrying grants.
func (c *Cluster) ClientCertCreds(name string, grants ...tlsconf.Grant) credentials.TransportCredentials {
	c.t.Helper()
	f, err := c.pki.dir.IssueClient(name, certValid, grants...)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.credsOf(f.Cert, f.Key)
}

// credsOf trusts the cluster's CA and presents cert and key (none if
// empty).
func (c *Cluster) credsOf(cert, key string) credentials.TransportCredentials {
	c.t.Helper()
	cfg, err := tlsconf.ClientFiles(c.pki.dir.CAFile(), cert, key)
	if err != nil {
		c.t.Fatal(err)
	}
	return credentials.NewTLS(cfg)
}
