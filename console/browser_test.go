package console_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/internal/testenv"
)

var nodeBin string

func TestMain(m *testing.M) { testcluster.Main(m, &nodeBin) }

// chromium is Debian's package; CI installs it (RAFTQ_STRICT_FAULTS=1
// fails the test without it).
const chromium = "/usr/bin/chromium"

// shotsEnv names a directory for the screenshots (make console-shots
// writes docs/console/); by default they go to the test's artifact
// directory (go test -artifacts keeps them).
const shotsEnv = "RAFTQ_CONSOLE_SHOTS"

// TestBrowser drives the console of a real 3-node TLS cluster (client
// auth required) in headless Chromium: login, every page without a
// console error, figures equal to the API's, a viewer's redrive refused
// with the API's words, and an admin's redrive clicked through (dry run,
// then redrive) moving the messages.
func TestBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		testenv.SkipOrFail(t, "needs "+chromium+" (Debian package chromium)")
	}
	c := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 1, TLS: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, adminKey, err := admin.CreateKey(ctx, "console-admin", client.Grant{Role: "admin", Queues: "*"})
	if err != nil {
		t.Fatal(err)
	}
	_, viewerKey, err := admin.CreateKey(ctx, "console-viewer", client.Grant{Role: "viewer", Queues: "*"})
	if err != nil {
		t.Fatal(err)
	}
	seed(ctx, t, admin)

	// The browser uses the console of the shard's leader: its commit
	// latencies come from that node's own metrics, and the load below goes
	// through it. The rates are cluster-wide: the end of the test reads
	// them from another node's console.
	// A new shard hands its leadership to its preferred replica (the first
	// listed) soon after it forms: wait for that, so the leader stays put.
	var st *client.ClusterStatus
	for {
		if st, err = admin.Status(ctx); err != nil {
			t.Fatal(err)
		}
		if sh := st.Shards[0]; len(sh.Replicas) > 0 && sh.LeaderID == sh.Replicas[0] {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("shard 0 never settled on its preferred replica: %+v", st.Shards[0])
		case <-time.After(200 * time.Millisecond):
		}
	}
	node := c.Nodes[0]
	for _, n := range c.Nodes {
		if n.ID == st.Shards[0].LeaderID {
			node = n
		}
	}
	base := "https://" + node.HTTP
	checkPlaintext(t, node.HTTP)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go load(loadCtx, admin)

	dir := os.Getenv(shotsEnv)
	if dir == "" {
		dir = t.ArtifactDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.IgnoreCertErrors, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Chromium leaves its profile and singleton socket directories
		// behind; under the test's own directories they go when it ends.
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	// Every console error and uncaught exception fails the test.
	var mu sync.Mutex
	var jsErrors []string
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				jsErrors = append(jsErrors, "console.error: "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			desc := ""
			if d.Exception != nil {
				desc = d.Exception.Description
			}
			jsErrors = append(jsErrors, fmt.Sprintf("exception at %s:%d: %s %s", d.URL, d.LineNumber, d.Text, desc))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(jsErrors) > 0 {
			t.Fatalf("%s: the page logged errors:\n%s", what, strings.Join(jsErrors, "\n"))
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			if len(png) > 1<<20 {
				return fmt.Errorf("screenshot %s is %d bytes, over 1 MiB", name, len(png))
			}
			return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
		})
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	login := func(base, key string) {
		t.Helper()
		run("log in", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), key), submit("#login"),
			chromedp.WaitVisible(chromedp.ID("who")))
	}

	// A console page without a session goes to the login page.
	run("login page", chromedp.Navigate(base+"/console/queues"), chromedp.WaitVisible(chromedp.ID("token")), shot("login"))
	run("bad key", chromedp.SendKeys(chromedp.ID("token"), "rqk_not-a-key"), submit("#login"),
		chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("#error"); !strings.Contains(got, "UNAUTHENTICATED") {
		t.Fatalf("login with a wrong key: page says %q, want the API's UNAUTHENTICATED", got)
	}

	// A viewer sees the dead letters but may not redrive them.
	login(base, viewerKey)
	if got := text("#who"); got != "key/console-viewer" {
		t.Fatalf("logged in as %q, want key/console-viewer", got)
	}
	run("viewer dlq", chromedp.Navigate(base+"/console/dlq?queue=orders"), chromedp.WaitVisible(chromedp.ID("redrive-dry")),
		submit("#redrive-dry"), chromedp.WaitVisible(chromedp.ID("flash-error")))
	if got := text("#flash-error"); !strings.Contains(got, "PERMISSION_DENIED") {
		t.Fatalf("viewer's redrive: page says %q, want the API's PERMISSION_DENIED", got)
	}
	run("log out", submit("#logout"), chromedp.WaitVisible(chromedp.ID("token")))

	login(base, adminKey)
	// Cluster: nodes and the shard, refreshed live.
	run("cluster", chromedp.Navigate(base+"/console/"), chromedp.WaitVisible(chromedp.ID("shards")),
		waitText("#live-status", "live: updated"))
	if st, err = admin.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if got := text(`[data-live="meta-leader"]`); got != st.MetaLeaderID {
		t.Fatalf("cluster page: meta leader %q, API %q", got, st.MetaLeaderID)
	}
	for _, n := range c.Nodes {
		if got := text(`[data-live="node:` + n.ID + `:state"]`); got != "alive" {
			t.Fatalf("cluster page: node %s state %q", n.ID, got)
		}
	}
	// The leader's replica's latest snapshot, as that node reports it.
	lst, err := admin.StatusAt(ctx, st.Shards[0].LeaderAddr)
	if err != nil {
		t.Fatal(err)
	}
	wantSnap := "-"
	if s := lst.Shards[0]; s.LastSnapshotIndex > 0 {
		wantSnap = fmt.Sprintf("%d (term %d)", s.LastSnapshotIndex, s.LastSnapshotTerm)
	}
	if got := text(`[data-live="rep:0:` + st.Shards[0].LeaderID + `:snapshot"]`); got != wantSnap {
		t.Fatalf("cluster page: leader's snapshot %q, API %q", got, wantSnap)
	}

	// Queues: the depth shown equals QueueStats, and follows it live.
	run("queues", chromedp.Navigate(base+"/console/queues"), chromedp.WaitVisible(chromedp.ID("queues")))
	if _, err := admin.Send(ctx, "reports", []byte("one more")); err != nil {
		t.Fatal(err)
	}
	rs, err := admin.Stats(ctx, "reports")
	if err != nil {
		t.Fatal(err)
	}
	run("queues live", waitText(`[data-live="q:reports:ready"]`, strconv.FormatUint(rs.Ready, 10)))
	ost, err := admin.Stats(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if got := text(`[data-live="q:orders:dead"]`); got != strconv.FormatUint(ost.Dead, 10) {
		t.Fatalf("queues page: orders dead %q, API %d", got, ost.Dead)
	}

	// One queue: pause and resume through the page, checked by the API;
	// the plots fill from the console's samples.
	run("queue", chromedp.Navigate(base+"/console/queue?name=jobs"), chromedp.WaitVisible(chromedp.ID("pause")),
		submit("#pause"), chromedp.WaitVisible(chromedp.ID("notice")))
	if q, err := admin.GetQueue(ctx, "jobs"); err != nil || !q.Paused {
		t.Fatalf("after Pause on the page: paused %v, err %v", q.Paused, err)
	}
	run("resume", submit("#resume"), chromedp.WaitVisible(chromedp.ID("notice")),
		waitText("#paused", "no"), plotted("rates"), shot("queue"))

	// Dead letters: filter, dry run, redrive to another queue.
	run("dlq", chromedp.Navigate(base+"/console/dlq?queue=orders"), chromedp.WaitVisible(chromedp.ID("dead-messages")),
		chromedp.SendKeys(chromedp.ID("f-error"), "card declined"), submit("#filter"),
		chromedp.WaitVisible(chromedp.ID("redrive-dry")), chromedp.SendKeys(chromedp.ID("redrive-to"), "orders-retry"),
		submit("#redrive-dry"), chromedp.WaitVisible(chromedp.ID("plan")), shot("dlq"))
	if got := text("#matched"); got != "3" {
		t.Fatalf("dry run: %s would move, want the 3 declined cards", got)
	}
	if s, err := admin.Stats(ctx, "orders"); err != nil || s.Dead != 4 {
		t.Fatalf("a dry run moved something: orders dead %d (want 4), err %v", s.Dead, err)
	}
	run("redrive", submit("#redrive-confirm"), chromedp.WaitVisible(chromedp.ID("notice")))
	if got := text("#notice"); got != "redrove 3 message(s) to orders-retry" {
		t.Fatalf("after redrive: page says %q", got)
	}
	if s, err := admin.Stats(ctx, "orders"); err != nil || s.Dead != 1 {
		t.Fatalf("after redrive: orders dead %d (want the 1 other), err %v", s.Dead, err)
	}
	if s, err := admin.Stats(ctx, "orders-retry"); err != nil || s.Ready != 3 {
		t.Fatalf("after redrive: orders-retry ready %d (want 3), err %v", s.Ready, err)
	}

	// Message look-up: the remaining dead message and its attempts.
	dead, err := admin.ListDead(ctx, "orders", 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("list dead: %d, %v", len(dead), err)
	}
	run("message", chromedp.Navigate(base+"/console/message"), chromedp.WaitVisible(chromedp.ID("msg-id")),
		chromedp.SendKeys(chromedp.ID("msg-id"), dead[0].ID), submit("#lookup"),
		chromedp.WaitVisible(chromedp.ID("history")), shot("message"))
	if got := text("#msg-state"); got != "dead" {
		t.Fatalf("message page: state %q, want dead", got)
	}
	if got := text("#history"); !strings.Contains(got, "out of stock") {
		t.Fatalf("message page: history %q lacks the attempt's error", got)
	}

	// Discard: the ticked dead message is gone.
	run("discard", chromedp.Navigate(base+"/console/dlq?queue=orders"), chromedp.WaitVisible(chromedp.ID("dead-messages")),
		chromedp.Click(chromedp.CSS(`#dead-messages input[name="ids"]`)), submit("#discard"))
	if got := text("#notice"); got != "discarded 1 message(s)" {
		t.Fatalf("after discard: page says %q", got)
	}
	if s, err := admin.Stats(ctx, "orders"); err != nil || s.Dead != 0 {
		t.Fatalf("after discard: orders dead %d (want 0), err %v", s.Dead, err)
	}

	// Schedules: trigger through the page.
	run("schedules", chromedp.Navigate(base+"/console/schedules"), chromedp.WaitVisible(chromedp.ID("schedules")),
		submit(`tr[data-schedule="nightly"] button[value="trigger"]`), chromedp.WaitVisible(chromedp.ID("notice")), shot("schedules"))
	if s, err := admin.GetSchedule(ctx, "nightly"); err != nil || s.TriggersRequested != 1 {
		t.Fatalf("after Trigger: triggers requested %d, err %v", s.TriggersRequested, err)
	}

	// The cluster page last: by now the shard's leader has proposals to plot.
	run("cluster shot", chromedp.Navigate(base+"/console/"), plotted("lat:0"), shot("cluster"))
	// The queue list once the console has rates for the load.
	run("queues shot", chromedp.Navigate(base+"/console/queues"), chromedp.WaitVisible(chromedp.ID("queues")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`document.querySelector('[data-live="q:jobs:sent"]').textContent !== "-"`,
				chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			return err
		}), shot("queues"))

	// Rates are cluster-wide: the console of a node that neither leads the
	// shard nor serves the load (its sends, receives and acks go through
	// the leader) shows them from QueueStats, where a node's own counters
	// of the calls it served would show nothing.
	other := c.Nodes[0]
	for _, n := range c.Nodes {
		if n.ID != node.ID {
			other = n
		}
	}
	if other.ID == node.ID {
		t.Fatalf("no node other than the leader %s", node.ID)
	}
	login("https://"+other.HTTP, adminKey)
	run("rates on another node's console", chromedp.Navigate("https://"+other.HTTP+"/console/queue?name=jobs"),
		chromedp.WaitVisible(chromedp.ID("stats")),
		positive("#rate-acked"), positive("#rate-sent"), positive("#rate-received"), plotted("rates"))
	if st, err := admin.Stats(ctx, "jobs"); err != nil || st.Moves["acked"] == 0 || st.Moves["sent"] == 0 {
		t.Fatalf("QueueStats of jobs under load: moves %v, err %v; want sends and acks counted", st.Moves, err)
	}
}

// positive waits until sel shows a rate above 0: the console has sampled
// the load twice.
func positive(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](fmt.Sprintf(`parseFloat(document.querySelector(%q).textContent) > 0`, sel),
			chromedp.WithPollingTimeout(30*time.Second))(ctx, tg)
		if err != nil {
			got, _ := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			return fmt.Errorf("%s shows %q, want a rate above 0: %w", sel, strings.TrimSpace(got), err)
		}
		return nil
	})
}

// submit clicks the button sel, whose form loads a new page, and waits
// until the new page has loaded: a mark set on the old page's window is
// gone on the new one.
func submit(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := chromedp.Evaluate[bool](`window.__stale = true`)(ctx, tg); err != nil {
			return err
		}
		if _, err := chromedp.Click(chromedp.CSS(sel))(ctx, tg); err != nil {
			return err
		}
		for {
			// Errors pass while the old page's context goes away.
			done, err := chromedp.Evaluate[bool](`!window.__stale && document.readyState === "complete"`)(ctx, tg)
			if err == nil && done {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("clicked %s: no new page: %w", sel, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// plotted waits until the plot named key has a line. The page's script
// redraws plots every 2 s, so the test polls in the page rather than
// holding on to a node that the next refresh replaces.
func plotted(key string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](fmt.Sprintf(`document.querySelectorAll('svg[data-plot=%q] polyline').length > 0`, key),
			chromedp.WithPollingTimeout(30*time.Second))(ctx, tg)
		if err != nil {
			return fmt.Errorf("plot %s never drew a line: %w", key, err)
		}
		return nil
	})
}

// load sends to jobs and takes from it, through the client's shard
// leader, until ctx ends: the plots have something to show.
func load(ctx context.Context, c *client.Client) {
	for i := 0; ctx.Err() == nil; i++ {
		_, _ = c.Send(ctx, "jobs", []byte(fmt.Sprintf("load %d", i)), client.Type("email"))
		if i%2 == 0 {
			if ms, err := c.Receive(ctx, "jobs", client.ReceiveOptions{Max: 1}); err == nil && len(ms) == 1 {
				_ = c.Ack(ctx, ms[0].Receipt)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitText waits until sel's text is want (or, for a want ending in a
// space-free prefix like "live: updated", starts with it).
func waitText(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			got, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			if err != nil {
				return err
			}
			got = strings.TrimSpace(got)
			if got == want || strings.HasPrefix(got, want) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s shows %q, want %q: %w", sel, got, want, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
}

// seed makes what the pages show: queue jobs with messages, queue orders
// with 4 dead messages (3 declined cards, 1 out of stock), the redrive
// target and a schedule.
func seed(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	for _, q := range []string{"jobs", "orders", "orders-retry", "reports"} {
		if _, err := c.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		if _, err := c.Send(ctx, "jobs", []byte(fmt.Sprintf("job %d", i)), client.Type("email")); err != nil {
			t.Fatal(err)
		}
	}
	reasons := []string{"card declined", "card declined", "card declined", "out of stock"}
	for i, r := range reasons {
		if _, err := c.Send(ctx, "orders", []byte(fmt.Sprintf("order %d", i)), client.Type("charge")); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Receive(ctx, "orders", client.ReceiveOptions{Max: 1, Wait: 5 * time.Second, Consumer: "worker-1"})
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive: %d, %v", len(ms), err)
		}
		if err := c.DeadLetter(ctx, ms[0].Receipt, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateSchedule(ctx, client.Schedule{Name: "nightly", Spec: "0 3 * * *", Queue: "jobs", Body: []byte("report {{slot}}")}); err != nil {
		t.Fatal(err)
	}
}

// checkPlaintext: on a TLS node, /metrics and /healthz still answer in
// plaintext (scrapers, probes), and a console page redirects to https.
func checkPlaintext(t *testing.T, addr string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/metrics": 200, "/healthz": 200, "/console/queues": http.StatusMovedPermanently} {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("plaintext GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("plaintext GET %s: %s, want %d", path, resp.Status, want)
		}
		if want == http.StatusMovedPermanently && resp.Header.Get("Location") != "https://"+addr+path {
			t.Fatalf("plaintext GET %s redirects to %q", path, resp.Header.Get("Location"))
		}
	}
	// A form posted in plaintext is refused, not redirected.
	resp, err := hc.Post("http://"+addr+"/console/login", "application/x-www-form-urlencoded", strings.NewReader("token=rqk_x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plaintext POST /console/login: %s, want 400", resp.Status)
	}
	// Over TLS the node's certificate serves the console.
	tc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // a test CA
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = tc.Get("https://" + addr + "/console/login")
	if err != nil {
		t.Fatalf("https GET /console/login: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("https GET /console/login: %s", resp.Status)
	}
}
