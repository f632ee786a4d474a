package console

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/client"
)

// noNode is a Dial that finds no node: these tests cover what the
// console checks before any API call (browser_test.go drives a real
// cluster).
func noNode(context.Context, string) (*client.Client, error) {
	return nil, status.Error(codes.Unavailable, "no node in this test")
}

func newTest(t *testing.T, o Options) *Console {
	t.Helper()
	if o.Dial == nil {
		o.Dial = noNode
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func do(c *Console, r *http.Request) *httptest.ResponseRecorder {
	if r.Host == "example.com" { // httptest's default: a name the console refuses
		r.Host = "127.0.0.1:7401"
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w
}

func form(path string, v url.Values, cookie *http.Cookie) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		r.AddCookie(cookie)
	}
	return r
}

// anonSession opens a page on a node that needs no login and returns the
// session cookie and the page's CSRF token.
func anonSession(t *testing.T, c *Console) (*http.Cookie, string) {
	t.Helper()
	w := do(c, httptest.NewRequest(http.MethodGet, "/console/queues", nil))
	var ck *http.Cookie
	for _, k := range w.Result().Cookies() {
		if k.Name == c.cookie {
			ck = k
		}
	}
	if ck == nil {
		t.Fatalf("no session cookie: %v", w.Header())
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != Prefix {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path %s", ck, Prefix)
	}
	body := w.Body.String()
	i := strings.Index(body, `name="csrf" value="`)
	if i < 0 {
		return ck, ""
	}
	rest := body[i+len(`name="csrf" value="`):]
	return ck, rest[:strings.IndexByte(rest, '"')]
}

func TestNewRefusesBadLimits(t *testing.T) {
	for _, o := range []Options{
		{Dial: noNode, MaxSessions: -1},
		{Dial: noNode, MaxSampled: -1},
		{Dial: noNode, SessionTTL: time.Second},
		{Dial: noNode, SampleEvery: time.Millisecond},
		{Dial: noNode, SampleEvery: time.Minute, Window: time.Second},
		{},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) took it", o)
		}
	}
}

func TestLoginRequired(t *testing.T) {
	c := newTest(t, Options{RequireLogin: true, Secure: true})
	w := do(c, httptest.NewRequest(http.MethodGet, "/console/queues?x=1", nil))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/login?next="+url.QueryEscape("/console/queues?x=1") {
		t.Fatalf("page without login: %d %q", w.Code, w.Header().Get("Location"))
	}
	w = do(c, httptest.NewRequest(http.MethodGet, "/console/api/queues", nil))
	var out live
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusUnauthorized || !strings.Contains(out.Error, "log in") {
		t.Fatalf("JSON without login: %d %q %v", w.Code, out.Error, err)
	}
	w = do(c, form("/console/queue/pause", url.Values{"name": {"q"}}, nil))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("POST without login: %d", w.Code)
	}
	if w := do(c, httptest.NewRequest(http.MethodGet, "/console/login", nil)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="token"`) {
		t.Fatalf("login page: %d", w.Code)
	}
}

func TestLoginRefusesBadKeys(t *testing.T) {
	c := newTest(t, Options{RequireLogin: true})
	for token, want := range map[string]string{
		"":                                "enter an API key",
		"hunter2":                         "that is not an API key",
		"rqk_" + strings.Repeat("x", 600): "that is not an API key",
		"rqk_real-looking":                "login refused: UNAVAILABLE",
	} {
		w := do(c, form("/console/login", url.Values{"token": {token}}, nil))
		if w.Code < 400 || !strings.Contains(w.Body.String(), want) {
			t.Errorf("login with %.20q: %d, body lacks %q", token, w.Code, want)
		}
		if len(w.Result().Cookies()) != 0 {
			t.Errorf("login with %.20q set a cookie", token)
		}
	}
	r := form("/console/login", url.Values{"token": {"rqk_x"}}, nil)
	r.Header.Set("Origin", "https://evil.example")
	if w := do(c, r); w.Code != http.StatusForbidden {
		t.Fatalf("cross-origin login: %d, want 403", w.Code)
	}
}

func TestFormChecks(t *testing.T) {
	c := newTest(t, Options{})
	ck, csrf := anonSession(t, c)
	if csrf != "" {
		t.Fatalf("the queues page failed (no node) yet showed a form")
	}
	se := c.sessions.get(ck.Value)
	if se == nil {
		t.Fatal("no session behind the cookie")
	}
	csrf = se.csrf

	// No token, a wrong one, another origin: refused before any call.
	for name, r := range map[string]*http.Request{
		"no token":    form("/console/queue/pause", url.Values{"name": {"q"}}, ck),
		"wrong token": form("/console/queue/pause", url.Values{"name": {"q"}, "csrf": {"x" + csrf}}, ck),
	} {
		if w := do(c, r); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, w.Code)
		}
	}
	r := form("/console/queue/pause", url.Values{"name": {"q"}, "csrf": {csrf}}, ck)
	r.Header.Set("Origin", "http://evil.example")
	if w := do(c, r); w.Code != http.StatusForbidden {
		t.Errorf("cross-origin: %d, want 403", w.Code)
	}

	// A body over the limit.
	big := url.Values{"name": {strings.Repeat("q", MaxBodyBytes)}, "csrf": {csrf}}
	if w := do(c, form("/console/queue/pause", big, ck)); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d, want 413", w.Code)
	}

	// A good form whose field is missing: back with the error as a flash.
	w := do(c, form("/console/queue/pause", url.Values{"csrf": {csrf}, "back": {"/console/queues"}}, ck))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/queues" {
		t.Fatalf("form without name: %d %q", w.Code, w.Header().Get("Location"))
	}
	if f := c.sessions.takeFlash(se); f.Error != "INVALID_ARGUMENT: rpc error: code = InvalidArgument desc = name is required" {
		t.Fatalf("flash %+v", f)
	}
	// A back link off the console goes to the console instead.
	w = do(c, form("/console/queue/pause", url.Values{"csrf": {csrf}, "back": {"//evil.example/x"}}, ck))
	if w.Header().Get("Location") != Prefix {
		t.Fatalf("back off-site: %q", w.Header().Get("Location"))
	}
	// Redrive to the queue itself is refused as the CLI refuses it.
	w = do(c, form("/console/dlq/redrive", url.Values{"csrf": {csrf}, "queue": {"q"}, "to": {"q"}, "dry_run": {"1"}}, ck))
	if f := c.sessions.takeFlash(se); w.Code != http.StatusSeeOther || !strings.Contains(f.Error, "is the queue itself") {
		t.Fatalf("redrive to itself: %d %+v", w.Code, f)
	}
	w = do(c, form("/console/schedule", url.Values{"csrf": {csrf}, "name": {"s"}, "do": {"explode"}}, ck))
	if f := c.sessions.takeFlash(se); !strings.Contains(f.Error, `unknown schedule action "explode"`) {
		t.Fatalf("bad schedule action: %d %+v", w.Code, f)
	}
}

func TestBadRequests(t *testing.T) {
	c := newTest(t, Options{})
	for path, want := range map[string]int{
		"/console/nope":              http.StatusNotFound,
		"/console/api/queue":         http.StatusBadRequest, // no name
		"/console/queues":            http.StatusServiceUnavailable,
		"/console/static/console.js": http.StatusOK,
		"/console/static/missing.js": http.StatusNotFound,
	} {
		if w := do(c, httptest.NewRequest(http.MethodGet, path, nil)); w.Code != want {
			t.Errorf("GET %s: %d, want %d", path, w.Code, want)
		}
	}
	if w := do(c, httptest.NewRequest(http.MethodDelete, "/console/queues", nil)); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d", w.Code)
	}
	w := do(c, httptest.NewRequest(http.MethodGet, "/console/queues", nil))
	if !strings.Contains(w.Body.String(), "UNAVAILABLE: rpc error: code = Unavailable desc = no node in this test") {
		t.Errorf("the page does not show the API's error: %s", w.Body.String())
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
}

func TestSessionBound(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSessions(sessionLimits{max: 2, perPrincipal: 8, ttl: time.Hour, idle: time.Hour}, func() time.Time { return now })
	a, err := s.create(nil, client.Principal{}, true)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := s.create(nil, client.Principal{}, false); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	// Full: the anonymous session makes room, the logged-in one stays.
	b, err := s.create(nil, client.Principal{}, true)
	if err != nil || s.count() != 2 || s.get(a.id) == nil {
		t.Fatalf("third session: %v, %d sessions, first kept %v", err, s.count(), s.get(a.id) != nil)
	}
	// Full of logged-in sessions: refused.
	if _, err := s.create(nil, client.Principal{}, true); !errors.Is(err, errTooManySessions) {
		t.Fatalf("past the bound: %v", err)
	}
	// Expired sessions end and make room.
	now = now.Add(2 * time.Hour)
	if s.get(b.id) != nil {
		t.Fatal("an expired session still answers")
	}
	for i := range 2 {
		if _, err := s.create(nil, client.Principal{}, true); err != nil {
			t.Fatalf("session %d after expiry: %v", i, err)
		}
	}
	if s.get(a.id) != nil {
		t.Fatal("an expired session was kept past the bound")
	}
	// The sampler's tick ends expired sessions nobody touches.
	now = now.Add(2 * time.Hour)
	s.pruneExpired()
	if n := s.count(); n != 0 {
		t.Fatalf("%d sessions after every one expired", n)
	}
}

func TestAnonymousSessionsEvicted(t *testing.T) {
	c := newTest(t, Options{MaxSessions: 2})
	for i := range 5 {
		if w := do(c, httptest.NewRequest(http.MethodGet, "/console/login", nil)); w.Code != http.StatusOK {
			t.Fatalf("visit %d: %d", i, w.Code)
		}
		anonSession(t, c)
	}
	if n := c.sessions.count(); n != 2 {
		t.Fatalf("%d sessions, want the bound 2", n)
	}
}

func TestSamplerBounds(t *testing.T) {
	now := time.Unix(0, 0)
	s := newSampler(2, 3, func() time.Time { return now })
	for _, q := range []string{"a", "b", "c"} {
		for i := range 5 {
			now = now.Add(time.Second)
			s.addQueue(client.QueueStats{Name: q, Ready: uint64(i)})
		}
	}
	if s.queue("c") != nil {
		t.Fatal("a third queue was sampled past the bound of 2")
	}
	got := s.queue("a")
	if len(got) != 3 || got[0].Ready != 2 || got[2].Ready != 4 {
		t.Fatalf("ring of a: %+v, want the last 3 samples", got)
	}
	s.retain(map[string]bool{"b": true})
	if s.queue("a") != nil || s.queue("b") == nil {
		t.Fatal("retain kept a deleted queue or dropped a live one")
	}
}

// Rates come from the cluster-wide moves of QueueStats: dead letters of
// both kinds together, and a count that went down (a shard's leader
// changed or restarted) gives no rate for the interval, not 0.
func TestRates(t *testing.T) {
	t0 := time.Unix(0, 0)
	s := newSampler(4, 8, func() time.Time { return t0 })
	s.addQueue(client.QueueStats{Name: "q", Moves: map[string]uint64{"sent": 10, "received": 4, "acked": 3, "dead_lettered": 1}})
	if r := s.lastRates("q"); r.ok {
		t.Fatalf("rates %+v from one sample", r)
	}
	t0 = t0.Add(2 * time.Second)
	s.addQueue(client.QueueStats{Name: "q", Moves: map[string]uint64{
		"sent": 30, "received": 2, "acked": 7, "dead_lettered": 1, "dead_lettered_by_client": 2, "nacked": 50,
	}})
	r := s.lastRates("q")
	if !r.ok || r.Sent != 10 || !math.IsNaN(r.Received) || r.Acked != 2 || r.DeadLettered != 1 {
		t.Fatalf("rates %+v, want sent 10, received none (reset), acked 2, dead-lettered 1 per second", r)
	}
	if got := rate(r, r.Received); got != "-" {
		t.Fatalf("a reset interval shows %q, want -", got)
	}
	if got := rate(r, r.Acked); got != "2.0" {
		t.Fatalf("the acked rate shows %q, want 2.0", got)
	}
	// A server that reports no moves: zero counts, zero rates.
	t0 = t0.Add(2 * time.Second)
	s.addQueue(client.QueueStats{Name: "q"})
	if r := s.lastRates("q"); !r.ok || !math.IsNaN(r.Sent) || !math.IsNaN(r.Acked) {
		t.Fatalf("rates %+v after the counts went to nothing, want none", r)
	}
	t0 = t0.Add(2 * time.Second)
	s.addQueue(client.QueueStats{Name: "q"})
	if r := s.lastRates("q"); !r.ok || r.Sent != 0 || r.Acked != 0 {
		t.Fatalf("rates %+v of an idle queue, want 0", r)
	}
}

// A page reached under a name the console was not told of is refused
// before any session exists: a site whose name was rebound to the node's
// address must not act with the console's rights.
func TestHostCheck(t *testing.T) {
	c := newTest(t, Options{Hosts: []string{"raftq.internal"}})
	for host, want := range map[string]int{
		"127.0.0.1:7401":      http.StatusOK,
		"[::1]:7401":          http.StatusOK,
		"localhost:7401":      http.StatusOK,
		"raftq.internal:7401": http.StatusOK,
		"RAFTQ.internal.":     http.StatusOK,
		"rebind.evil:7401":    http.StatusMisdirectedRequest,
		"":                    http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "/console/login", nil)
		r.Host = host
		w := do(c, r)
		if w.Code != want {
			t.Errorf("host %q: %d, want %d", host, w.Code, want)
		}
		if want != http.StatusOK && (len(w.Result().Cookies()) != 0 || !strings.Contains(w.Body.String(), "--console-hosts")) {
			t.Errorf("host %q: cookies %v, body %q", host, w.Result().Cookies(), w.Body.String())
		}
	}
}

// Origin "null" (a sandboxed frame) is another site's request.
func TestNullOriginRefused(t *testing.T) {
	c := newTest(t, Options{RequireLogin: true})
	r := form("/console/login", url.Values{"token": {"rqk_x"}}, nil)
	r.Header.Set("Origin", "null")
	if w := do(c, r); w.Code != http.StatusForbidden {
		t.Fatalf("login with Origin null: %d, want 403", w.Code)
	}
}

// Consoles of nodes on one host keep separate cookies.
func TestCookieNamedAfterNode(t *testing.T) {
	a, b := newTest(t, Options{NodeID: "n1"}), newTest(t, Options{NodeID: "n2 x"})
	if a.cookie != "raftq_console_n1" || b.cookie != "raftq_console_n2_x" {
		t.Fatalf("cookies %q %q", a.cookie, b.cookie)
	}
}

// One principal's logins past its cap end its own oldest session, never
// another principal's; a session unused for the idle time ends.
func TestSessionPerPrincipalAndIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newSessions(sessionLimits{max: 4, perPrincipal: 2, ttl: 12 * time.Hour, idle: time.Hour}, func() time.Time { return now })
	other, err := s.create(nil, client.Principal{Name: "key/admin"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var mine []*session
	for range 5 {
		now = now.Add(time.Second)
		se, err := s.create(nil, client.Principal{Name: "key/viewer"}, true)
		if err != nil {
			t.Fatalf("login of one principal past its cap was refused: %v", err)
		}
		mine = append(mine, se)
	}
	if s.count() != 3 || s.get(other.id) == nil || s.get(mine[4].id) == nil || s.get(mine[3].id) == nil || s.get(mine[2].id) != nil {
		t.Fatalf("after 5 logins of one key: %d sessions; want the other key's and the newest two", s.count())
	}
	now = now.Add(time.Hour + time.Second)
	if s.get(mine[4].id) != nil {
		t.Fatal("a session idle for over an hour still answers")
	}
}

// Links carry names with "/" (tenant queues) and spaces (error filters)
// encoded once: html/template escapes query values in an href itself.
func TestLinksEncodeNamesOnce(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	v := &view{Title: "Queues", Nav: "queues", Data: &queuesData{Rows: []queueRow{{Info: client.QueueInfo{Name: "acme/jobs"}}}, Total: 1, Shown: 1}}
	if err := pages["queues"].ExecuteTemplate(&b, "layout", v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, `href="/console/queue?name=acme%2fjobs"`) || strings.Contains(out, "%252") {
		t.Fatalf("queue link of acme/jobs not encoded once:\n%s", out)
	}
	b.Reset()
	d := &dlqData{Queue: "acme/jobs", ErrorText: "connection refused", Next: "tok"}
	if err := pages["dlq"].ExecuteTemplate(&b, "layout", &view{Title: "Dead letters", Nav: "queues", Data: d}); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	if !strings.Contains(out, "error=connection%20refused") || strings.Contains(out, "%2b") || strings.Contains(out, "%252") {
		t.Fatalf("dead-letter links not encoded once:\n%s", out)
	}
}
