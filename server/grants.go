package server

import (
	"fmt"
	"strings"

	"github.com/raftq/raftq/fsm"
	"github.com/raftq/raftq/meta/metapb"
)

// perm is what a call needs of its principal's grants.
type perm int

const (
	// permAny: any authenticated principal (routing, status, WhoAmI).
	permAny perm = iota
	permRead
	permSend
	permConsume
	// permManage: the admin role on the queue.
	permManage
	// permCluster: the admin role on every queue ("admin:*").
	permCluster
)

func (p perm) String() string {
	switch p {
	case permRead:
		return "the viewer, producer, consumer or admin role"
	case permSend:
		return "the producer or admin role"
	case permConsume:
		return "the consumer or admin role"
	case permManage:
		return "the admin role"
	case permCluster:
		return "the admin role on every queue (admin:*)"
	}
	return "a credential"
}

func roleGives(r metapb.Role, p perm) bool {
	switch r {
	case metapb.Role_ROLE_ADMIN:
		return true
	case metapb.Role_ROLE_PRODUCER:
		return p == permRead || p == permSend
	case metapb.Role_ROLE_CONSUMER:
		return p == permRead || p == permConsume
	case metapb.Role_ROLE_VIEWER:
		return p == permRead
	}
	return false
}

// matches reports whether pattern covers queue: "*", a prefix ending in
// '*', or the name itself. An empty queue (a call that names none, such
// as an ack by receipt) is covered by any pattern.
func matches(pattern, queue string) bool {
	if queue == "" || pattern == "*" || pattern == queue {
		return true
	}
	prefix, ok := strings.CutSuffix(pattern, "*")
	return ok && strings.HasPrefix(queue, prefix)
}

// Allows reports whether p may do what needs on queue. A tenant's
// principal never holds permCluster, and its grants cover only its
// tenant's queues, matched by their names within the tenant.
func (p *Principal) Allows(need perm, queue string) bool {
	if p.Unrestricted || need == permAny {
		return true
	}
	if p.Tenant != "" {
		if need == permCluster {
			return false
		}
		if queue != "" {
			own, ok := strings.CutPrefix(queue, p.Tenant+fsm.TenantSep)
			if !ok {
				return false
			}
			queue = own
		}
	}
	for _, g := range p.Grants {
		if !roleGives(g.GetRole(), need) {
			continue
		}
		if need == permCluster {
			if g.GetQueues() == "*" {
				return true
			}
			continue
		}
		if matches(g.GetQueues(), queue) {
			return true
		}
	}
	return false
}

func (p *Principal) grantList() string {
	if len(p.Grants) == 0 {
		return "no grants"
	}
	parts := make([]string, len(p.Grants))
	for i, g := range p.Grants {
		parts[i] = roleName(g.GetRole()) + ":" + g.GetQueues()
	}
	if p.Tenant != "" {
		return fmt.Sprintf("grants %s in tenant %q", strings.Join(parts, ", "), p.Tenant)
	}
	return "grants " + strings.Join(parts, ", ")
}

func roleName(r metapb.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

func parseRole(s string) (metapb.Role, bool) {
	r, ok := metapb.Role_value["ROLE_"+strings.ToUpper(s)]
	if !ok || r == 0 {
		return 0, false
	}
	return metapb.Role(r), true
}

// denied is the refusal of a call p's grants do not cover.
func denied(p *Principal, method string, need perm, queue string) error {
	on := ""
	if queue != "" && need != permCluster {
		on = fmt.Sprintf(" on queue %q", queue)
	}
	return errPermission(fmt.Sprintf("%s may not call %s%s: it needs %s%s, and holds %s",
		p.Name, shortMethod(method), on, need, on, p.grantList()))
}

func shortMethod(m string) string { return strings.TrimPrefix(m, "/raftq.v1.") }
