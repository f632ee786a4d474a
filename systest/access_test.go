package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/tlsconf"
)

// tokenCreds sends an API key on every call of a raw connection.
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// TestAccessControl runs a TLS cluster with its default --client-auth
// require and checks, attack by attack, that a principal does only what
// its grants allow, that a revoked or rotated key stops working on every
// node, and that the audit trail records who did what, refusals included
// (issue #30). Each refusal is checked to have changed nothing.
func TestAccessControl(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1, TLS: true})
	ctx := ctxT(t, 4*time.Minute)
	once := client.WithRetry(client.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})

	t.Run("no credentials", func(t *testing.T) {
		_, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.AnonymousCreds()), once)
		if !strings.Contains(fmt.Sprint(err), "requires credentials") {
			t.Fatalf("dial without credentials: %v; want a refusal naming the credentials", err)
		}
		cc, err := grpc.NewClient(c.Nodes[0].GRPC, grpc.WithTransportCredentials(c.AnonymousCreds()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if _, err := raftqv1.NewQueuesClient(cc).CreateQueue(ctx, &raftqv1.CreateQueueRequest{Name: "nope"}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("CreateQueue without credentials: %v", err)
		}
		if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health check without credentials: %v", err)
		}
		if _, err := queues(c, 0).GetQueue(ctx, &raftqv1.GetQueueRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
			t.Fatalf("the refused CreateQueue made a queue: %v", err)
		}
	})

	admin, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for q, n := range map[string]int{"orders.eu": 5, "billing": 3} {
		if _, err := admin.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := admin.Send(ctx, q, []byte(fmt.Sprintf("%s-%d", q, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	key := func(name string, g ...client.Grant) string {
		t.Helper()
		k, token, err := admin.CreateKey(ctx, name, g...)
		if err != nil {
			t.Fatalf("create key %s: %v", name, err)
		}
		if !strings.HasPrefix(k.CreatedBy, "client/admin") || !strings.HasPrefix(token, "rqk_"+k.ID+"_") {
			t.Fatalf("key %s: %+v, token %q", name, k, token)
		}
		return token
	}
	prodToken := key("prod", client.Grant{Role: "producer", Queues: "orders.*"})
	consToken := key("cons", client.Grant{Role: "consumer", Queues: "orders.*"})
	viewToken := key("view", client.Grant{Role: "viewer", Queues: "*"})
	if _, _, err := admin.CreateKey(ctx, "prod", client.Grant{Role: "admin", Queues: "*"}); !errors.Is(err, client.ErrExists) {
		t.Fatalf("a second key named prod: %v", err)
	}
	if _, _, err := admin.CreateKey(ctx, "bad", client.Grant{Role: "root", Queues: "*"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("a key with role root: %v", err)
	}
	dialToken := func(token string) *client.Client {
		t.Helper()
		cl, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.AnonymousCreds()), client.WithToken(token), once)
		if err != nil {
			t.Fatalf("dial with a token: %v", err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	deniedErr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrDenied) {
			t.Fatalf("%s: %v; want PERMISSION_DENIED", what, err)
		}
	}

	prod := dialToken(prodToken)
	t.Run("producer", func(t *testing.T) {
		if who, err := prod.WhoAmI(ctx); err != nil || who.Name != "key/prod" || len(who.Grants) != 1 || who.Grants[0].String() != "producer:orders.*" {
			t.Fatalf("whoami: %+v %v", who, err)
		}
		r, err := prod.Send(ctx, "orders.eu", []byte("p"))
		if err != nil {
			t.Fatalf("send on its queue: %v", err)
		}
		if _, err := prod.GetMessage(ctx, r.ID); err != nil {
			t.Fatalf("read back what it sent: %v", err)
		}
		_, err = prod.Send(ctx, "billing", []byte("p"))
		deniedErr("send on another queue", err)
		_, err = prod.PurgeQueue(ctx, "orders.eu")
		deniedErr("a producer key purging its queue", err)
		if !strings.Contains(err.Error(), "key/prod may not call Queues/PurgeQueue") || !strings.Contains(err.Error(), "admin role") {
			t.Fatalf("refusal does not say who and what is missing: %v", err)
		}
		_, err = prod.Receive(ctx, "orders.eu", client.ReceiveOptions{Max: 1})
		deniedErr("receive as a producer", err)
		_, _, err = prod.CreateKey(ctx, "mine", client.Grant{Role: "admin", Queues: "*"})
		deniedErr("a producer making itself an admin key", err)
		_, err = prod.SetShardCount(ctx, 2, true)
		deniedErr("a producer growing the cluster", err)
		qs, err := prod.ListQueues(ctx)
		if err != nil || len(qs) != 1 || qs[0].Name != "orders.eu" {
			t.Fatalf("list: %v %v; want orders.eu only", qs, err)
		}
		if got := depth(t, c, "orders.eu"); got != 6 {
			t.Fatalf("orders.eu holds %d messages, want 6: a refused call changed it", got)
		}
		if got := depth(t, c, "billing"); got != 3 {
			t.Fatalf("billing holds %d messages, want 3", got)
		}
	})

	cons := dialToken(consToken)
	t.Run("consumer", func(t *testing.T) {
		ms, err := cons.Receive(ctx, "orders.eu", client.ReceiveOptions{Max: 2})
		if err != nil || len(ms) == 0 {
			t.Fatalf("receive on its queue: %v %v", ms, err)
		}
		if err := cons.Ack(ctx, ms[0].Receipt); err != nil {
			t.Fatalf("ack what it received: %v", err)
		}
		_, err = cons.Send(ctx, "orders.eu", []byte("c"))
		deniedErr("send as a consumer", err)
		_, err = cons.Receive(ctx, "billing", client.ReceiveOptions{Max: 1})
		deniedErr("receive on another queue", err)
		// A viewer holding a receipt still may not settle it.
		view := dialToken(viewToken)
		if _, err := view.Stats(ctx, "billing"); err != nil {
			t.Fatalf("a viewer reading stats: %v", err)
		}
		deniedErr("a viewer acking", view.Ack(ctx, ms[1].Receipt))
		_, err = view.Send(ctx, "billing", []byte("v"))
		deniedErr("a viewer sending", err)
		if got := depth(t, c, "orders.eu"); got != 5 {
			t.Fatalf("orders.eu holds %d messages after one ack, want 5", got)
		}
	})

	t.Run("certificate grants", func(t *testing.T) {
		ops, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCertCreds("ops", tlsconf.Grant{Role: "admin", Queues: "billing"})), once)
		if err != nil {
			t.Fatal(err)
		}
		defer ops.Close()
		if n, err := ops.PurgeQueue(ctx, "billing"); err != nil || n != 3 {
			t.Fatalf("an admin of billing purging it: %d %v", n, err)
		}
		_, err = ops.PurgeQueue(ctx, "orders.eu")
		deniedErr("an admin of billing purging orders.eu", err)
		_, err = ops.ListKeys(ctx)
		deniedErr("an admin of one queue listing keys", err)
		if got := depth(t, c, "orders.eu"); got != 5 {
			t.Fatalf("orders.eu holds %d messages, want 5", got)
		}
	})

	t.Run("subscribing needs the topic's consumer role", func(t *testing.T) {
		if _, err := admin.CreateTopic(ctx, "news", client.TopicOptions{}); err != nil {
			t.Fatal(err)
		}
		spy, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCertCreds("spy", tlsconf.Grant{Role: "admin", Queues: "spy-*"})), once)
		if err != nil {
			t.Fatal(err)
		}
		defer spy.Close()
		// Managing the new queue is not enough: it would read every
		// publication of the topic.
		_, err = spy.CreateQueue(ctx, "spy-news", client.QueueOptions{SubscriptionOf: "news"})
		deniedErr("an admin of spy-* subscribing to news", err)
		reader, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCertCreds("reader",
			tlsconf.Grant{Role: "admin", Queues: "reader-*"}, tlsconf.Grant{Role: "consumer", Queues: "news"})), once)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close()
		if _, err := reader.CreateQueue(ctx, "reader-news", client.QueueOptions{SubscriptionOf: "news"}); err != nil {
			t.Fatalf("a consumer of news subscribing to it: %v", err)
		}
	})

	// refusedEverywhere waits until every node refuses token as
	// unauthenticated: each applies the key change from its own meta
	// replica, within milliseconds of the commit.
	refusedEverywhere := func(what, token string) {
		t.Helper()
		for i, n := range c.Nodes {
			cc, err := grpc.NewClient(n.GRPC, grpc.WithTransportCredentials(c.AnonymousCreds()), grpc.WithPerRPCCredentials(tokenCreds(token)))
			if err != nil {
				t.Fatal(err)
			}
			var last error
			waitFor(t, ctx, fmt.Sprintf("node %d refusing the %s key", i, what), func() bool {
				_, last = raftqv1.NewMessagesClient(cc).Send(ctx, &raftqv1.SendRequest{Queue: "orders.eu", Body: []byte("late")})
				return status.Code(last) == codes.Unauthenticated
			})
			if !strings.Contains(last.Error(), "not valid on this cluster") {
				t.Fatalf("node %d: %v; want the key named as not valid", i, last)
			}
			_ = cc.Close()
		}
	}

	t.Run("rotated key", func(t *testing.T) {
		k, newToken, err := admin.RotateKey(ctx, "cons")
		if err != nil || newToken == consToken || k.Rotated.IsZero() {
			t.Fatalf("rotate: %+v %v", k, err)
		}
		refusedEverywhere("rotated-out consumer", consToken)
		if _, err := dialToken(newToken).Receive(ctx, "orders.eu", client.ReceiveOptions{Max: 1}); err != nil {
			t.Fatalf("the new token: %v", err)
		}
	})

	t.Run("revoked key", func(t *testing.T) {
		before := depth(t, c, "orders.eu")
		if err := admin.RevokeKey(ctx, "prod"); err != nil {
			t.Fatal(err)
		}
		refusedEverywhere("revoked producer", prodToken)
		_, err := prod.Send(ctx, "orders.eu", []byte("after"))
		if !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("the revoked key's client: %v", err)
		}
		if got := depth(t, c, "orders.eu"); got != before {
			t.Fatalf("orders.eu holds %d messages after the revoked key's sends, want %d", got, before)
		}
		ks, err := admin.ListKeys(ctx)
		if err != nil || len(ks) != 2 {
			t.Fatalf("keys after a revoke: %+v %v", ks, err)
		}
	})

	t.Run("audit trail", func(t *testing.T) {
		want := []string{
			"client/admin Access/CreateKey OK",
			"client/admin Access/CreateKey AlreadyExists",
			"key/prod Queues/PurgeQueue PermissionDenied",
			"key/prod Access/CreateKey PermissionDenied",
			"client/ops Queues/PurgeQueue OK",
			"client/ops Queues/PurgeQueue PermissionDenied",
			"client/admin Access/RotateKey OK",
			"client/admin Access/RevokeKey OK",
		}
		// The trail is read from the answering node's meta replica, which
		// may be a few milliseconds behind the leader's.
		var recs []client.AuditRecord
		var got []string
		waitFor(t, ctx, "every administrative call in the audit trail", func() bool {
			var err error
			if recs, err = admin.ListAudit(ctx, 0, 1000); err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, r := range recs {
				who, _, _ := strings.Cut(r.Caller, "@")
				got = append(got, who+" "+r.Method+" "+r.Code)
			}
			return strings.Contains(strings.Join(got, "\n"), want[len(want)-1])
		})
		for _, r := range recs {
			if r.Node == "" || r.At.IsZero() || r.Seq == 0 {
				t.Errorf("record without node, time or seq: %+v", r)
			}
		}
		all := strings.Join(got, "\n")
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("audit trail lacks %q; it holds:\n%s", w, all)
			}
		}
		if strings.Contains(all, "anonymous") || strings.Contains(all, "unauthenticated") {
			t.Errorf("an unauthenticated call entered the trail:\n%s", all)
		}
		for _, r := range recs {
			if strings.Contains(r.Request, "rqk_") {
				t.Errorf("a token entered the audit trail: %+v", r)
			}
		}
		// Paging: the answering node may be another, a heartbeat behind.
		after := recs[len(recs)-2].Seq
		waitFor(t, ctx, "the page after the second newest record", func() bool {
			page, err := admin.ListAudit(ctx, after, 10)
			if err != nil {
				t.Fatal(err)
			}
			return len(page) == 1 && page[0].Seq == recs[len(recs)-1].Seq
		})
	})

	t.Run("cli", func(t *testing.T) { accessCLI(t, ctx, c) })
}

// accessCLI drives keys, whoami and audit through the raftq CLI, and
// checks that its refusals say what is missing.
func accessCLI(t *testing.T, ctx context.Context, c *testcluster.Cluster) {
	af := c.PKI().ClientFilesOf("admin")
	ca := []string{"--ca", af.CA}
	asAdmin := append(ca, "--cert", af.Cert, "--key", af.Key)
	cli := func(wantOK bool, args ...string) string {
		t.Helper()
		out, err := runCLI(ctx, c.Addrs()[:1], args...)
		if (err == nil) != wantOK {
			t.Fatalf("raftq %v: %v\n%s", args, err, out)
		}
		return out
	}
	out := cli(true, append(asAdmin, "keys", "create", "cli-app", "--grant", "consumer:orders.*", "--grant", "viewer:billing")...)
	_, token, ok := strings.Cut(out, "token (shown once; keep it secret): ")
	token = strings.TrimSpace(token)
	if !ok || !strings.HasPrefix(token, "rqk_") {
		t.Fatalf("keys create printed no token:\n%s", out)
	}
	if out := cli(true, append(ca, "--token", token, "whoami")...); !strings.Contains(out, "key/cli-app") || !strings.Contains(out, "consumer:orders.*,viewer:billing") {
		t.Fatalf("whoami: %q", out)
	}
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := cli(false, append(ca, "--token-file", tokenFile, "queue", "purge", "orders.eu")...); !strings.Contains(out, "key/cli-app may not call Queues/PurgeQueue") || strings.Contains(out, "raftq: raftq:") {
		t.Fatalf("purge with a consumer key: %q", out)
	}
	if out := cli(false, append(ca, "queue", "list")...); !strings.Contains(out, "requires credentials") || !strings.Contains(out, "--token") {
		t.Fatalf("no credentials: %q", out)
	}
	if out := cli(false, append(ca, "--token", "rqk_nonsense", "queue", "list")...); !strings.Contains(out, "malformed") {
		t.Fatalf("a malformed token: %q", out)
	}
	if out := cli(false, append(asAdmin, "keys", "create", "x", "--grant", "root:*")...); !strings.Contains(out, `role "root"`) {
		t.Fatalf("a bad role: %q", out)
	}
	if out := cli(true, append(asAdmin, "keys", "list")...); !strings.Contains(out, "cli-app") || strings.Contains(out, token[20:]) {
		t.Fatalf("keys list: %q", out)
	}
	cli(true, append(asAdmin, "keys", "revoke", "cli-app")...)
	waitFor(t, ctx, "the CLI's revoked key refused", func() bool {
		out, err := runCLI(ctx, c.Addrs()[:1], append(ca, "--token", token, "whoami")...)
		return err != nil && strings.Contains(out, "not valid on this cluster")
	})
	waitFor(t, ctx, "the CLI's key changes in the audit trail", func() bool {
		out := cli(true, append(asAdmin, "audit", "--limit", "1000")...)
		return strings.Contains(out, "key/cli-app") && strings.Contains(out, "Access/RevokeKey")
	})
}
