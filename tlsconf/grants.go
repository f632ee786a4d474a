package tlsconf

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// grantScheme names the grants a client certificate carries, one URI SAN
// each: raftq-grant://ROLE/PATTERN. The CA that signs a client certificate
// is the authority on what it may do, as it is on who it is, so no cluster
// state is needed to authorize its holder; reissuing changes the grants.
const grantScheme = "raftq-grant"

// Grant is one role on the queues a pattern matches (a name, a prefix
// ending in '*', or "*"). Roles are checked by the server
// (server/access.go); here they are only carried.
type Grant struct {
	Role   string
	Queues string
}

func (g Grant) String() string { return g.Role + ":" + g.Queues }

// ParseGrant reads "ROLE:PATTERN", as the CLI takes it.
func ParseGrant(s string) (Grant, error) {
	role, queues, ok := strings.Cut(s, ":")
	if !ok || role == "" || queues == "" || strings.ContainsAny(s, " /\t") {
		return Grant{}, fmt.Errorf("grant %q: want ROLE:QUEUES, such as producer:orders.* or admin:*", s)
	}
	return Grant{Role: role, Queues: queues}, nil
}

func (g Grant) uri() *url.URL {
	return &url.URL{Scheme: grantScheme, Host: g.Role, Path: "/" + g.Queues}
}

// GrantsOf reads the grants of a certificate.
func GrantsOf(c *x509.Certificate) []Grant {
	var out []Grant
	for _, u := range c.URIs {
		if u.Scheme == grantScheme {
			out = append(out, Grant{Role: u.Host, Queues: strings.TrimPrefix(u.Path, "/")})
		}
	}
	return out
}
