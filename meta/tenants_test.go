package meta

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

func putTenantCmd(name string, q *fsmpb.Quotas, create bool) *metapb.Command {
	return &metapb.Command{Cmd: &metapb.Command_PutTenant{PutTenant: &metapb.PutTenant{Tenant: &metapb.Tenant{Name: name, Quotas: q}, Create: create}}}
}

func TestFSM_Tenants(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 1, 10, placeCmd(4, []string{"n1", "n2", "n3"}))
	step := func(cmd *metapb.Command) *metapb.Result { return applyAt(t, f, f.AppliedIndex()+1, 100, cmd) }
	expect := func(cmd *metapb.Command, code metapb.Code, msg string) {
		t.Helper()
		if res := step(cmd); res.GetCode() != code || !strings.Contains(res.GetMessage(), msg) {
			t.Fatalf("%v: got %v %q, want %v containing %q", cmd, res.GetCode(), res.GetMessage(), code, msg)
		}
	}
	expect(createCmd("acme/jobs", policy(1000)), metapb.Code_CODE_NOT_FOUND, `tenant "acme" not found`)
	expect(putTenantCmd("acme", &fsmpb.Quotas{MaxQueues: 2}, false), metapb.Code_CODE_NOT_FOUND, "not found")
	expect(putTenantCmd("Acme", nil, true), metapb.Code_CODE_INVALID, "tenant name")
	expect(putTenantCmd("acme", &fsmpb.Quotas{MaxQueues: 2}, true), metapb.Code_CODE_OK, "")
	expect(putTenantCmd("acme", &fsmpb.Quotas{MaxQueues: 2}, true), metapb.Code_CODE_OK, "") // a retried create
	expect(putTenantCmd("acme", &fsmpb.Quotas{MaxQueues: 3}, true), metapb.Code_CODE_EXISTS, "other quotas")

	// max_queues 2: two are taken, a third refused as a quota, a
	// retried create of an existing one still answers.
	expect(createCmd("acme/a", policy(1000)), metapb.Code_CODE_OK, "")
	expect(createCmd("acme/b", policy(1000)), metapb.Code_CODE_OK, "")
	expect(createCmd("acme/c", policy(1000)), metapb.Code_CODE_QUOTA, "max_queues is 2")
	expect(createCmd("acme/a", policy(1000)), metapb.Code_CODE_OK, "")
	expect(createCmd("c", policy(1000)), metapb.Code_CODE_OK, "") // no tenant: no quota
	expect(putTenantCmd("acme", &fsmpb.Quotas{MaxQueues: 3}, false), metapb.Code_CODE_OK, "")
	expect(createCmd("acme/c", policy(1000)), metapb.Code_CODE_OK, "")

	// Keys of a tenant need it to exist, and hold it until revoked.
	k := keyCmd("k1", "acme-prod", 1, grant(metapb.Role_ROLE_PRODUCER, "*"))
	k.GetCreateApiKey().GetKey().Tenant = "nope"
	expect(k, metapb.Code_CODE_NOT_FOUND, `tenant "nope"`)
	k.GetCreateApiKey().GetKey().Tenant = "acme"
	expect(k, metapb.Code_CODE_OK, "")

	expect(&metapb.Command{Cmd: &metapb.Command_DeleteTenant{DeleteTenant: &metapb.DeleteTenant{Name: "acme"}}}, metapb.Code_CODE_REFUSED, "3 queue(s)")
	for _, q := range []string{"acme/a", "acme/b", "acme/c"} {
		expect(deleteCmd(q), metapb.Code_CODE_OK, "")
	}
	expect(&metapb.Command{Cmd: &metapb.Command_DeleteTenant{DeleteTenant: &metapb.DeleteTenant{Name: "acme"}}}, metapb.Code_CODE_REFUSED, "API key k1")
	expect(&metapb.Command{Cmd: &metapb.Command_RevokeApiKey{RevokeApiKey: &metapb.RevokeApiKey{Id: "k1"}}}, metapb.Code_CODE_OK, "")
	expect(&metapb.Command{Cmd: &metapb.Command_DeleteTenant{DeleteTenant: &metapb.DeleteTenant{Name: "acme"}}}, metapb.Code_CODE_OK, "")
	if len(f.Tenants()) != 0 {
		t.Fatalf("tenants left: %v", f.Tenants())
	}
}

func TestFSM_TenantsSurviveSnapshot(t *testing.T) {
	f := NewFSM(nil)
	applyAt(t, f, 1, 10, putTenantCmd("zed", &fsmpb.Quotas{SendRate: 5}, true))
	applyAt(t, f, 2, 20, putTenantCmd("acme", &fsmpb.Quotas{MaxMessages: 7}, true))
	g := restoredCopy(t, f)
	ts := g.Tenants()
	if len(ts) != 2 || ts[0].GetName() != "acme" || ts[0].GetQuotas().GetMaxMessages() != 7 || ts[1].GetCreatedMs() != 10 {
		t.Fatalf("restored tenants %v", ts)
	}
}

// A shard enforces its share: each limit over the shard count, rounded
// up; rates split with a burst of at least one; the tenant's message
// size cap lowers the queue's.
func TestShardPolicyShares(t *testing.T) {
	q := &metapb.Queue{Name: "acme/jobs", Policy: &fsmpb.QueuePolicy{MaxMessageBytes: 256 << 10,
		Quotas: &fsmpb.Quotas{MaxMessages: 10, MaxBytes: 1 << 20, MaxInFlight: 1, SendRate: 100}}}
	ten := &metapb.Tenant{Name: "acme", Quotas: &fsmpb.Quotas{MaxMessages: 9, MaxInFlight: 4, SendRate: 2, SendBurst: 6, MaxMessageBytes: 1024}}
	p := shardPolicy(q, ten, 4)
	want := &fsmpb.ShardQuota{MaxMessages: 3, MaxBytes: 1 << 18, MaxInFlight: 1, SendRate: 25, SendBurst: 25,
		TenantMaxMessages: 3, TenantMaxInFlight: 1, TenantSendRate: 0.5, TenantSendBurst: 1.5}
	if !proto.Equal(p.GetShardQuota(), want) {
		t.Fatalf("share over 4 shards:\n got %v\nwant %v", p.GetShardQuota(), want)
	}
	if p.GetMaxMessageBytes() != 1024 || q.GetPolicy().GetMaxMessageBytes() != 256<<10 || q.GetPolicy().GetShardQuota() != nil {
		t.Fatalf("message cap %d (queue's own now %d), or the queue's policy was changed", p.GetMaxMessageBytes(), q.GetPolicy().GetMaxMessageBytes())
	}
	if got := shardPolicy(&metapb.Queue{Name: "plain", Policy: policy(1000)}, nil, 4); got.GetShardQuota() != nil {
		t.Fatalf("a queue without quotas got a share: %v", got.GetShardQuota())
	}
	if got := rateShareBurst(1, 8); got != 1 {
		t.Fatalf("burst of a rate of 1 over 8 shards: %v, want 1", got)
	}
}

func rateShareBurst(rate uint32, n uint32) float64 {
	_, b := rateShare(&fsmpb.Quotas{SendRate: rate}, n)
	return b
}

// Only a replica of format 6 may apply what tenancy adds.
func TestCommandFormatTenancy(t *testing.T) {
	for _, c := range []struct {
		cmd  *metapb.Command
		want uint32
	}{
		{createCmd("jobs", policy(1)), 1},
		{createCmd("acme/jobs", policy(1)), 6},
		{createCmd("jobs", &fsmpb.QueuePolicy{Quotas: &fsmpb.Quotas{MaxMessages: 1}}), 6},
		{updateCmd("jobs", &fsmpb.QueuePolicy{Quotas: &fsmpb.Quotas{MaxMessages: 1}}), 6},
		{keyCmd("k", "n", 1, grant(metapb.Role_ROLE_ADMIN, "*")), 5},
		{putTenantCmd("acme", nil, true), 6},
	} {
		if got := CommandFormat(c.cmd); got != c.want {
			t.Errorf("CommandFormat(%v) = %d, want %d", c.cmd, got, c.want)
		}
	}
	k := keyCmd("k", "n", 1, grant(metapb.Role_ROLE_ADMIN, "*"))
	k.GetCreateApiKey().GetKey().Tenant = "acme"
	if got := CommandFormat(k); got != 6 {
		t.Errorf("a tenant's key needs format %d, want 6", got)
	}
}
