package tlsconf

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role says what a certificate's holder is to the cluster.
type Role string

const (
	// RoleNode is a cluster member: it may join raft groups, gossip and call
	// the node-to-node service.
	RoleNode Role = "node"
	// RoleClient is a producer, consumer, operator or tool.
	RoleClient Role = "client"
)

// uriScheme names raftq identities in a certificate's URI SANs:
// raftq://node/<node id> or raftq://client/<name>. A URI SAN, not the
// common name, because only SANs are covered by name constraints and Go's
// verifier ignores the common name.
const uriScheme = "raftq"

// Identity is who a certificate speaks for.
type Identity struct {
	Role Role
	Name string
}

func (i Identity) String() string { return string(i.Role) + "/" + i.Name }

// URI is the SAN that carries the identity.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: string(i.Role), Path: "/" + i.Name}
}

// Validate refuses an identity no certificate should carry.
func (i Identity) Validate() error {
	if i.Role != RoleNode && i.Role != RoleClient {
		return fmt.Errorf("role %q: want %q or %q", i.Role, RoleNode, RoleClient)
	}
	if i.Name == "" || strings.ContainsAny(i.Name, "/ \t\r\n") || len(i.Name) > 128 {
		return fmt.Errorf("name %q: want 1-128 characters without spaces or slashes", i.Name)
	}
	return nil
}

// ErrNoIdentity: the certificate carries no raftq URI SAN.
var ErrNoIdentity = errors.New("certificate carries no raftq identity (a raftq://node/ID or raftq://client/NAME URI SAN)")

// IdentityOf reads the raftq identity of a certificate. Exactly one raftq
// URI SAN is allowed, so a certificate cannot speak for two names.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range c.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		id := Identity{Role: Role(u.Host), Name: strings.TrimPrefix(u.Path, "/")}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("certificate identity %s: %w", u, err)
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, ErrNoIdentity
	case 1:
		return found[0], nil
	default:
		return Identity{}, fmt.Errorf("certificate carries %d raftq identities; one is allowed", len(found))
	}
}
