package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/meta/metapb"
)

// Every method the client port serves has an access rule: a method
// added without one would be refused to everyone, so this names it first.
func TestAccessRulesCoverEveryMethod(t *testing.T) {
	g := grpc.NewServer()
	New(nil, nil, nil, nil).Register(g)
	reflection.Register(g)
	n := 0
	for svc, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			name := "/" + svc + "/" + m.Name
			if _, ok := rules[name]; !ok {
				t.Errorf("no access rule for %s", name)
			}
			n++
		}
	}
	if n < 35 {
		t.Fatalf("only %d methods registered: the check looked at the wrong server", n)
	}
}

func TestPrincipalAllows(t *testing.T) {
	p := &Principal{Name: "key/app", Grants: []*metapb.Grant{
		{Role: metapb.Role_ROLE_PRODUCER, Queues: "orders.*"},
		{Role: metapb.Role_ROLE_CONSUMER, Queues: "jobs"},
		{Role: metapb.Role_ROLE_ADMIN, Queues: "team-a.*"},
	}}
	for _, c := range []struct {
		need  perm
		queue string
		want  bool
	}{
		{permSend, "orders.eu", true},
		{permSend, "orders", false}, // the prefix is "orders.", not "orders"
		{permSend, "jobs", false},
		{permConsume, "jobs", true},
		{permConsume, "jobs2", false},
		{permConsume, "orders.eu", false},
		{permRead, "orders.eu", true},
		{permRead, "billing", false},
		{permManage, "orders.eu", false},
		{permManage, "team-a.x", true},
		{permSend, "team-a.x", true}, // admin covers every role on its queues
		{permCluster, "", false},     // admin of some queues is not admin of the cluster
		{permAny, "", true},
		{permConsume, "", true}, // settling by receipt: a consumer role somewhere
	} {
		if got := p.Allows(c.need, c.queue); got != c.want {
			t.Errorf("Allows(%v, %q) = %v, want %v", c.need, c.queue, got, c.want)
		}
	}
	viewer := &Principal{Name: "key/v", Grants: []*metapb.Grant{{Role: metapb.Role_ROLE_VIEWER, Queues: "*"}}}
	if viewer.Allows(permConsume, "") || viewer.Allows(permSend, "x") || !viewer.Allows(permRead, "x") {
		t.Error("a viewer may read only")
	}
	admin := &Principal{Name: "client/admin", Grants: []*metapb.Grant{{Role: metapb.Role_ROLE_ADMIN, Queues: "*"}}}
	if !admin.Allows(permCluster, "") {
		t.Error("admin:* may run the cluster")
	}
	err := denied(p, "/raftq.v1.Queues/PurgeQueue", permManage, "orders.eu")
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("denied: %v", err)
	}
	for _, want := range []string{"key/app", "Queues/PurgeQueue", `"orders.eu"`, "the admin role", "producer:orders.*"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
}

func TestAPIKeyTokens(t *testing.T) {
	id, token, sum, err := newAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	gotID, gotSum, err := parseToken(token)
	if err != nil || gotID != id || gotSum != sum {
		t.Fatalf("parse %s: %s %x %v; want %s %x", token, gotID, gotSum, err, id, sum)
	}
	_, other, _, _ := newAPIKey()
	if other == token {
		t.Fatal("two keys share a token")
	}
	for _, bad := range []string{"", "rqk_", token[:len(token)-1], "xyz" + token[3:], "rqk_" + strings.Repeat("g", 16) + token[20:]} {
		if _, _, err := parseToken(bad); err == nil {
			t.Errorf("parseToken(%q) took a malformed token", bad)
		}
	}
}

// A tenant's principal reaches its tenant's queues only, named with or
// without the tenant, and never holds the cluster admin role.
func TestTenantPrincipal(t *testing.T) {
	p := &Principal{Name: "key/acme-app", Tenant: "acme", Grants: []*metapb.Grant{
		{Role: metapb.Role_ROLE_ADMIN, Queues: "*"},
		{Role: metapb.Role_ROLE_PRODUCER, Queues: "x"},
	}}
	for _, c := range []struct {
		need  perm
		queue string
		want  bool
	}{
		{permManage, "acme/jobs", true},
		{permSend, "acme/x", true},
		{permSend, "beta/jobs", false},
		{permSend, "jobs", false}, // a queue outside every tenant
		{permCluster, "", false},  // admin:* inside a tenant is not the cluster's
		{permConsume, "", true},   // by receipt
	} {
		if got := p.Allows(c.need, c.queue); got != c.want {
			t.Errorf("Allows(%v, %q) = %v, want %v", c.need, c.queue, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{{"jobs", "acme/jobs"}, {"acme/jobs", "acme/jobs"}, {"beta/jobs", "beta/jobs"}, {"", ""}} {
		req := &raftqv1.SendRequest{Queue: c.in}
		qualify(req, "acme")
		if req.GetQueue() != c.want {
			t.Errorf("qualify(%q) = %q, want %q", c.in, req.GetQueue(), c.want)
		}
	}
	req := &raftqv1.CreateQueueRequest{Name: "jobs"}
	qualify(req, "acme")
	if req.GetName() != "acme/jobs" {
		t.Errorf("qualify of a name field: %q", req.GetName())
	}
	// A subscription names its topic in its policy: the tenant's too.
	for _, c := range []struct{ in, want string }{{"orders", "acme/orders"}, {"beta/orders", "beta/orders"}, {"", ""}} {
		req := &raftqv1.CreateQueueRequest{Name: "billing", Policy: &raftqv1.QueuePolicy{SubscriptionOf: c.in}}
		qualify(req, "acme")
		if req.GetName() != "acme/billing" || req.GetPolicy().GetSubscriptionOf() != c.want {
			t.Errorf("qualify of subscription_of %q: %q of %q, want %q", c.in, req.GetName(), req.GetPolicy().GetSubscriptionOf(), c.want)
		}
	}
	if err := denied(p, "/raftq.v1.Messages/Send", permSend, "beta/jobs"); !strings.Contains(err.Error(), `in tenant "acme"`) {
		t.Errorf("refusal %v does not name the tenant", err)
	}
}
