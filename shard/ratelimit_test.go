package shard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func TestRateLimitsBucket(t *testing.T) {
	var r rateLimits
	now := time.Unix(1000, 0)
	sq := &fsmpb.ShardQuota{SendRate: 10, SendBurst: 5}
	// A full bucket takes the burst, and the next send waits a tenth of a
	// second for one token.
	for i := range 5 {
		if err := r.admit("acme/q", sq, 1, now); err != nil {
			t.Fatalf("send %d of the burst: %v", i, err)
		}
	}
	err := r.admit("acme/q", sq, 1, now)
	var re *RateError
	if !errors.As(err, &re) || re.RetryAfter != 100*time.Millisecond || !strings.Contains(err.Error(), `queue "acme/q" is at its quota`) {
		t.Fatalf("past the burst: %v", err)
	}
	if err := r.admit("acme/q", sq, 1, now.Add(100*time.Millisecond)); err != nil {
		t.Fatalf("after a token refilled: %v", err)
	}
	// Another queue has its own bucket.
	if err := r.admit("acme/other", sq, 1, now); err != nil {
		t.Fatal(err)
	}
	// A batch above the burst passes a full bucket, leaving it in debt.
	if err := r.admit("big", sq, 50, now); err != nil {
		t.Fatalf("a batch above the burst on a full bucket: %v", err)
	}
	if err := r.admit("big", sq, 1, now.Add(time.Second)); err == nil {
		t.Fatal("a bucket in debt for 4.5 s took a send after 1 s")
	}
}

func TestRateLimitsTenantShared(t *testing.T) {
	var r rateLimits
	now := time.Unix(1000, 0)
	sq := &fsmpb.ShardQuota{TenantSendRate: 1, TenantSendBurst: 2}
	if err := r.admit("acme/a", sq, 1, now); err != nil {
		t.Fatal(err)
	}
	if err := r.admit("acme/b", sq, 1, now); err != nil {
		t.Fatal(err)
	}
	err := r.admit("acme/c", sq, 1, now)
	if err == nil || !strings.Contains(err.Error(), `tenant "acme"`) {
		t.Fatalf("third send of the tenant's burst of 2: %v", err)
	}
	if err := r.admit("beta/a", sq, 1, now); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	// A queue refused by its own rate takes nothing from its tenant.
	both := &fsmpb.ShardQuota{SendRate: 1, SendBurst: 1, TenantSendRate: 100, TenantSendBurst: 2}
	if err := r.admit("zed/q", both, 1, now); err != nil {
		t.Fatal(err)
	}
	if err := r.admit("zed/q", both, 1, now); err == nil {
		t.Fatal("queue rate not enforced")
	}
	if err := r.admit("zed/r", both, 1, now); err != nil {
		t.Fatalf("the refused send took the tenant's token: %v", err)
	}
	if err := r.admit("plain", nil, 1000, now); err != nil {
		t.Fatalf("no quota: %v", err)
	}
}
