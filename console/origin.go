package console

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// hostAllowed reports whether a request's Host names this node as the
// console expects to be reached: an IP address, localhost, or a name in
// Options.Hosts. A browser sends the name it resolved, so a site whose
// name was rebound to this node's address (DNS rebinding) arrives under
// its own name and is refused before any page or session exists for it.
func (c *Console) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, h := range c.o.Hosts {
		if strings.EqualFold(host, h) {
			return true
		}
	}
	return false
}

// sameOrigin reports whether a state-changing request comes from the
// console's own pages: a browser sends Origin with every POST, and it must
// name this host. "null" (a sandboxed frame, a redirect across sites) is
// another origin. A request without Origin comes from something other
// than a current browser and still needs the session's CSRF token.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// cookieFor names the session cookie after the node, in the characters a
// cookie name may hold.
func cookieFor(nodeID string) string {
	var b strings.Builder
	b.WriteString("raftq_console")
	if nodeID != "" {
		b.WriteByte('_')
	}
	for _, r := range nodeID {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
