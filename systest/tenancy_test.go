package systest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// TestTenantQuotas runs a TLS cluster with two tenants and checks, quota
// by quota, that the limit is taken and one more is refused with
// RESOURCE_EXHAUSTED and a retry time (issue #32); that tenants'
// names do not collide and neither reaches the other; that the quotas
// hold after the shard leader is killed; and that the CLI drives it all.
// One shard, so each quota is exact (docs/tenancy.md, "Shares").
func TestTenantQuotas(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1, TLS: true})
	ctx := ctxT(t, 4*time.Minute)
	once := client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	admin, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	if _, err := admin.CreateTenant(ctx, "acme", client.Quotas{MaxQueues: 2, MaxMessages: 5, MaxInFlight: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTenant(ctx, "beta", client.Quotas{MaxMessageBytes: 1024}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateTenant(ctx, "Bad", client.Quotas{}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a tenant named Bad: %v", err)
	}
	dialTenant := func(tenant string) *client.Client {
		t.Helper()
		_, token, err := admin.CreateTenantKey(ctx, tenant, tenant+"-app", client.Grant{Role: "admin", Queues: "*"})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.AnonymousCreds()), client.WithToken(token), once)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	acme, beta := dialTenant("acme"), dialTenant("beta")
	exhausted := func(what string, err error, words string) {
		t.Helper()
		after, ok := client.RetryAfter(err)
		if !errors.Is(err, client.ErrExhausted) || !ok || after <= 0 || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v (retry after %v, %v); want RESOURCE_EXHAUSTED with a retry time, naming %q", what, err, after, ok, words)
		}
	}

	t.Run("names", func(t *testing.T) {
		for _, cl := range []*client.Client{acme, beta} {
			q, err := cl.CreateQueue(ctx, "jobs", client.QueueOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if who, _ := cl.WhoAmI(ctx); q.Name != who.Tenant+"/jobs" {
				t.Fatalf("queue %q for tenant %q", q.Name, who.Tenant)
			}
		}
		if _, err := acme.Send(ctx, "beta/jobs", []byte("x")); !errors.Is(err, client.ErrDenied) {
			t.Fatalf("acme sending to beta's queue: %v", err)
		}
		if _, err := acme.Stats(ctx, "beta/jobs"); !errors.Is(err, client.ErrDenied) {
			t.Fatalf("acme reading beta's queue: %v", err)
		}
		if _, err := acme.GetTenant(ctx, "beta"); !errors.Is(err, client.ErrDenied) {
			t.Fatalf("acme reading tenant beta: %v", err)
		}
		if _, err := acme.CreateTenant(ctx, "mine", client.Quotas{}); !errors.Is(err, client.ErrDenied) {
			t.Fatalf("a tenant's admin creating a tenant: %v", err)
		}
		qs, err := acme.ListQueues(ctx)
		if err != nil || len(qs) != 1 || qs[0].Name != "acme/jobs" {
			t.Fatalf("acme lists %v (%v), want only acme/jobs", qs, err)
		}
		all, err := admin.ListQueues(ctx)
		if err != nil || len(all) != 2 {
			t.Fatalf("the cluster admin lists %v (%v)", all, err)
		}
	})

	t.Run("max queues", func(t *testing.T) {
		if _, err := acme.CreateQueue(ctx, "second", client.QueueOptions{}); err != nil {
			t.Fatalf("the second queue of max_queues 2: %v", err)
		}
		_, err := acme.CreateQueue(ctx, "third", client.QueueOptions{})
		exhausted("a third queue", err, "max_queues is 2")
		if _, err := acme.GetQueue(ctx, "third"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("the refused queue exists: %v", err)
		}
	})

	t.Run("depth", func(t *testing.T) {
		for i, q := range []string{"jobs", "jobs", "jobs", "second", "second"} {
			if _, err := acme.Send(ctx, q, []byte{byte('a' + i)}); err != nil {
				t.Fatalf("send %d of the tenant's 5: %v", i+1, err)
			}
		}
		_, err := acme.Send(ctx, "jobs", []byte("f"))
		exhausted("the 6th message of the tenant", err, `tenant "acme" is at its quota`)
		// Another tenant is not held back.
		if _, err := beta.Send(ctx, "jobs", []byte("b")); err != nil {
			t.Fatal(err)
		}
		tn, err := admin.GetTenant(ctx, "acme")
		if err != nil || tn.Messages != 5 || tn.Queues != 2 || tn.LiveBytes != 5 {
			t.Fatalf("acme usage %+v (%v), want 5 messages in 2 queues", tn, err)
		}
	})

	t.Run("in flight", func(t *testing.T) {
		ms, err := acme.Receive(ctx, "jobs", client.ReceiveOptions{Max: 10})
		if err != nil || len(ms) != 2 {
			t.Fatalf("received %d (%v), want the 2 of max_in_flight", len(ms), err)
		}
		_, err = acme.Receive(ctx, "second", client.ReceiveOptions{Max: 1})
		exhausted("a third lease of the tenant", err, "max_in_flight")
		// A long poll at the quota waits, and the ack that frees a place
		// wakes it.
		type got struct {
			n   int
			err error
			at  time.Time
		}
		polled := make(chan got, 1)
		go func() {
			ms, err := acme.Receive(ctx, "second", client.ReceiveOptions{Max: 10, Wait: 15 * time.Second})
			polled <- got{len(ms), err, time.Now()}
		}()
		time.Sleep(500 * time.Millisecond)
		acked := time.Now()
		if err := acme.Ack(ctx, ms[0].Receipt); err != nil {
			t.Fatal(err)
		}
		if g := <-polled; g.err != nil || g.n != 1 || g.at.Sub(acked) > 5*time.Second {
			t.Fatalf("long poll at the quota: %d messages (%v) %v after the ack; want 1 soon after it", g.n, g.err, g.at.Sub(acked))
		}
	})

	t.Run("queue quotas", func(t *testing.T) {
		if _, err := beta.CreateQueue(ctx, "capped", client.QueueOptions{Quotas: client.Quotas{MaxMessages: 3, SendRate: 2, SendBurst: 2}}); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if _, err := beta.Send(ctx, "capped", []byte("r")); err != nil {
				t.Fatalf("send %d of the burst of 2: %v", i+1, err)
			}
		}
		_, err := beta.Send(ctx, "capped", []byte("r"))
		exhausted("a send past the rate", err, "send_rate")
		after, _ := client.RetryAfter(err)
		time.Sleep(after)
		if _, err := beta.Send(ctx, "capped", []byte("r")); err != nil {
			t.Fatalf("a send after the retry time: %v", err)
		}
		time.Sleep(time.Second)
		_, err = beta.Send(ctx, "capped", []byte("r"))
		exhausted("the 4th message of max_messages 3", err, "quotas.max_messages is 3")
		st, err := beta.Stats(ctx, "capped")
		if err != nil || st.Tenant != "beta" || st.Quotas.MaxMessages != 3 || st.TenantQuotas.MaxMessageBytes != 1024 || st.Ready != 3 {
			t.Fatalf("stats %+v (%v)", st, err)
		}
		// The tenant's message size cap applies to every queue of it.
		if _, err := beta.Send(ctx, "jobs", make([]byte, 1024)); err != nil {
			t.Fatalf("a 1024-byte body at the tenant's cap: %v", err)
		}
		if _, err := beta.Send(ctx, "jobs", make([]byte, 1025)); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "1024") {
			t.Fatalf("a 1025-byte body: %v", err)
		}
	})

	t.Run("failover", func(t *testing.T) {
		// The ack above freed one of acme's 5 places: fill it again.
		if _, err := acme.Send(ctx, "jobs", []byte("e")); err != nil {
			t.Fatalf("the 5th live message of acme again: %v", err)
		}
		l := shardLeader(t, c, 0, 0)
		c.Kill(l)
		defer c.Restart(l)
		// Once a new leader serves, the depth quotas still hold (its
		// replica counts the same messages), and so does the rate, from a
		// full bucket. A call that reaches the dead node is tried again;
		// one that is taken fails the test.
		refusedAfter := func(what string, send func() error, words string) {
			t.Helper()
			waitFor(t, ctx, what, func() bool {
				err := send()
				if err == nil {
					t.Fatalf("%s: taken after the failover", what)
				}
				if errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
					return false
				}
				exhausted(what, err, words)
				return true
			})
		}
		refusedAfter("acme's 6th message", func() error { _, err := acme.Send(ctx, "second", []byte("f")); return err }, `tenant "acme" is at its quota`)
		refusedAfter("the 4th message of capped", func() error { _, err := beta.Send(ctx, "capped", []byte("r")); return err }, "quotas.max_messages is 3")
		if _, err := admin.CreateQueue(ctx, "beta/rated", client.QueueOptions{Quotas: client.Quotas{SendRate: 1, SendBurst: 1}}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Send(ctx, "beta/rated", []byte("1")); err != nil {
			t.Fatal(err)
		}
		refusedAfter("a send past a rate of 1/s", func() error { _, err := beta.Send(ctx, "rated", []byte("2")); return err }, "send_rate")
	})

	t.Run("cli", func(t *testing.T) { tenancyCLI(t, ctx, c) })
}

// tenancyCLI drives tenants and quotas through the raftq CLI.
func tenancyCLI(t *testing.T, ctx context.Context, c *testcluster.Cluster) {
	af := c.PKI().ClientFilesOf("admin")
	asAdmin := []string{"--ca", af.CA, "--cert", af.Cert, "--key", af.Key}
	cli := func(wantOK bool, args ...string) string {
		t.Helper()
		out, err := runCLI(ctx, c.Addrs()[:1], append(asAdmin, args...)...)
		if (err == nil) != wantOK {
			t.Fatalf("raftq %v: %v\n%s", args, err, out)
		}
		return out
	}
	out := cli(true, "tenant", "create", "cli", "--max-queues", "1", "--send-rate", "100", "--max-size", "2048")
	if !strings.Contains(out, "100/s (burst 100)") || !strings.Contains(out, "2048") {
		t.Fatalf("tenant create:\n%s", out)
	}
	cli(true, "queue", "create", "cli/q", "--max-messages", "1")
	out = cli(false, "queue", "create", "cli/r")
	if !strings.Contains(out, "max_queues is 1") || !strings.Contains(out, "retry in") {
		t.Fatalf("a queue past max_queues:\n%s", out)
	}
	cli(true, "send", "cli/q", "one")
	out = cli(false, "send", "cli/q", "two")
	if !strings.Contains(out, "quotas.max_messages is 1") || !strings.Contains(out, "retry in") {
		t.Fatalf("a send past the queue's quota:\n%s", out)
	}
	out = cli(true, "queue", "stats", "cli/q")
	if !strings.Contains(out, `TENANT "cli"`) || !strings.Contains(out, "100/s (burst 100)") {
		t.Fatalf("queue stats:\n%s", out)
	}
	cli(true, "tenant", "update", "cli", "--max-queues", "2")
	out = cli(true, "tenant", "get", "cli")
	if !regexp.MustCompile(`(?m)^max-queues\s+2$`).MatchString(out) || !regexp.MustCompile(`(?m)^messages\s+1$`).MatchString(out) {
		t.Fatalf("tenant get:\n%s", out)
	}
	cli(true, "queue", "create", "cli/r")
	out = cli(false, "tenant", "delete", "cli")
	if !strings.Contains(out, "still has 2 queue(s)") {
		t.Fatalf("deleting a tenant with queues:\n%s", out)
	}
	if out := cli(true, "tenant", "list"); !strings.Contains(out, "acme") || !strings.Contains(out, "cli") {
		t.Fatalf("tenant list:\n%s", out)
	}
}

// A queue over two shards, at its in-flight share on one: a receive still
// leases from the other instead of answering the first shard's refusal,
// and is refused only when every shard with ready messages is at its
// share (max_in_flight 2 over 2 shards: 1 each).
func TestTenantInFlightOverShards(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 2})
	ctx := ctxT(t, 2*time.Minute)
	once := client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	cl, err := client.Dial(ctx, c.Addrs(), once)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateTenant(ctx, "acme", client.Quotas{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateQueue(ctx, "acme/q", client.QueueOptions{Quotas: client.Quotas{MaxInFlight: 2}}); err != nil {
		t.Fatal(err)
	}
	// Groups on both shards: 40 groups hash to both of 2 shards.
	for i := range 40 {
		if _, err := cl.Send(ctx, "acme/q", []byte{byte(i)}, client.Group(fmt.Sprint("g", i))); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 6 {
		var held []*client.Message
		for k := range 2 {
			ms, err := cl.Receive(ctx, "acme/q", client.ReceiveOptions{Max: 1})
			if err != nil || len(ms) != 1 {
				t.Fatalf("round %d, receive %d of the 2 in flight: %d (%v)", round, k+1, len(ms), err)
			}
			held = append(held, ms...)
		}
		_, err := cl.Receive(ctx, "acme/q", client.ReceiveOptions{Max: 1})
		if !errors.Is(err, client.ErrExhausted) || !strings.Contains(err.Error(), "max_in_flight") {
			t.Fatalf("round %d, a third receive: %v; want the in-flight quota", round, err)
		}
		for _, m := range held {
			if err := cl.Ack(ctx, m.Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
}
