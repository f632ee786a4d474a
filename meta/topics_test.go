package meta

import (
	"strings"
	"testing"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/meta/metapb"
)

func TestFSM_TopicsAndSubscriptions(t *testing.T) {
	f := NewFSM(nil)
	idx := uint64(0)
	apply := func(cmd *metapb.Command) *metapb.Result {
		idx++
		return applyAt(t, f, idx, 1000, cmd)
	}
	fifo := fsmpb.QueueMode_QUEUE_MODE_FIFO
	mustOK := func(cmd *metapb.Command) {
		t.Helper()
		if r := apply(cmd); r.GetCode() != metapb.Code_CODE_OK {
			t.Fatalf("%v: %v %s", cmd, r.GetCode(), r.GetMessage())
		}
	}
	refused := func(cmd *metapb.Command, code metapb.Code, words string) {
		t.Helper()
		if r := apply(cmd); r.GetCode() != code || !strings.Contains(r.GetMessage(), words) {
			t.Fatalf("%v: %v %q, want %v with %q", cmd, r.GetCode(), r.GetMessage(), code, words)
		}
	}
	mustOK(createCmd("orders", &fsmpb.QueuePolicy{Topic: true, Mode: fifo}))
	mustOK(createCmd("jobs", &fsmpb.QueuePolicy{}))
	refused(createCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "nope", Mode: fifo}), metapb.Code_CODE_NOT_FOUND, `topic "nope" not found`)
	refused(createCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "jobs"}), metapb.Code_CODE_INVALID, "not a topic")
	refused(createCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "orders"}), metapb.Code_CODE_INVALID, "mode of topic")
	mustOK(putTenantCmd("acme", nil, true))
	refused(createCmd("acme/s1", &fsmpb.QueuePolicy{SubscriptionOf: "orders", Mode: fifo}), metapb.Code_CODE_INVALID, "different tenants")
	mustOK(createCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "orders", Mode: fifo, Filter: "type = a"}))

	// What a queue is, and the mode of a topic or subscription, are fixed;
	// the filter may change.
	refused(updateCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "orders"}), metapb.Code_CODE_INVALID, "mode is fixed")
	refused(updateCmd("orders", &fsmpb.QueuePolicy{Topic: true}), metapb.Code_CODE_INVALID, "mode is fixed")
	refused(updateCmd("s1", &fsmpb.QueuePolicy{Mode: fifo}), metapb.Code_CODE_INVALID, "fixed when it is created")
	refused(updateCmd("jobs", &fsmpb.QueuePolicy{Topic: true}), metapb.Code_CODE_INVALID, "fixed when it is created")
	mustOK(updateCmd("s1", &fsmpb.QueuePolicy{SubscriptionOf: "orders", Mode: fifo, Filter: "type = b"}))

	refused(deleteCmd("orders"), metapb.Code_CODE_REFUSED, "delete them first")
	mustOK(deleteCmd("s1"))
	mustOK(deleteCmd("orders"))
}

func TestCommandFormat_Fanout(t *testing.T) {
	for _, p := range []*fsmpb.QueuePolicy{{Topic: true}, {SubscriptionOf: "t"}} {
		if n := CommandFormat(createCmd("q", p)); n != 8 {
			t.Errorf("create %v: format %d, want 8", p, n)
		}
		if n := CommandFormat(updateCmd("q", p)); n != 8 {
			t.Errorf("update %v: format %d, want 8", p, n)
		}
	}
	if n := CommandFormat(createCmd("q", &fsmpb.QueuePolicy{})); n != 1 {
		t.Errorf("plain create: format %d", n)
	}
}
