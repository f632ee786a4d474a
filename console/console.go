// Package console is the web console a raftq-node serves on its HTTP port
// (docs/console.md): cluster, queues, dead letters, messages and recurring
// schedules, read and changed through the cluster's public gRPC API with
// the client package, as the person logged in. It holds no privileges of
// its own: every page is what the caller's API key may see, every button
// a call the API authorizes and audits as for any other caller.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/raftq/raftq/client"
)

//go:embed web
var webFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// Defaults of Options' limits.
const (
	DefaultMaxSessions = 64
	// DefaultMaxPerPrincipal bounds one principal's logged-in sessions: a
	// new login past it ends that principal's least recently used one, so
	// one key cannot fill the console and lock every other user out.
	DefaultMaxPerPrincipal = 8
	DefaultSessionTTL      = 12 * time.Hour
	DefaultSessionIdle     = time.Hour
	DefaultMaxSampled      = 50
	DefaultSampleEvery     = 5 * time.Second
	DefaultWindow          = 10 * time.Minute
	// MaxBodyBytes bounds a POST body: the console's forms are small.
	MaxBodyBytes = 64 << 10
	// MaxListed bounds the queues one queue list shows: each costs a
	// QueueStats call per refresh.
	MaxListed = 200
)

// Options configure a Console.
type Options struct {
	// Dial connects to this node's client port as a caller holding token;
	// "" dials without one (anonymous: refused where the node requires
	// credentials, unrestricted where it runs --client-auth optional or
	// --insecure).
	Dial func(ctx context.Context, token string) (*client.Client, error)
	// RequireLogin: the node runs --client-auth require, so a caller must
	// log in with an API key before any page.
	RequireLogin bool
	// Secure: the console is served over TLS; its cookie is marked Secure.
	Secure bool
	NodeID string
	// Metrics, if set, is this node's /metrics handler; the console reads
	// it in process for the commit latency of proposals this node led.
	// Queue rates come from QueueStats, cluster-wide.
	Metrics http.Handler
	Logger  *slog.Logger

	// Hosts are the names, besides IP addresses and localhost, that
	// browsers may reach the console under (the Host header): a page of
	// another site whose name was rebound to this node's address is
	// refused, as it would otherwise act with the console's rights.
	Hosts []string

	MaxSessions     int           // live sessions at most; default 64
	MaxPerPrincipal int           // logged-in sessions of one principal at most; default 8
	SessionTTL      time.Duration // a session ends this long after login; default 12 h
	SessionIdle     time.Duration // or this long after its last request; default 1 h
	MaxSampled      int           // queues sampled for plots at most; default 50
	SampleEvery     time.Duration // default 5 s
	Window          time.Duration // what plots show; default 10 min
	Now             func() time.Time
}

// Console serves the pages. Create with New, start sampling with Run.
type Console struct {
	o        Options
	pages    map[string]*template.Template
	static   http.Handler
	sessions *sessions
	samples  *sampler
	mux      *http.ServeMux

	anonMu sync.Mutex
	anon   *client.Client // the shared client of callers without a key
	closed bool           // close ran: anonClient dials no more

	// cookie names the session cookie after the node: browsers keep one
	// cookie per host, not per port, so the consoles of nodes sharing a
	// host (make run) would otherwise overwrite each other's sessions.
	cookie string
}

// New checks o and builds a Console.
func New(o Options) (*Console, error) {
	if o.Dial == nil {
		return nil, errors.New("console: Options.Dial is required")
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxPerPrincipal == 0 {
		o.MaxPerPrincipal = DefaultMaxPerPrincipal
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	if o.MaxSampled == 0 {
		o.MaxSampled = DefaultMaxSampled
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = DefaultSampleEvery
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxSessions < 1 || o.MaxPerPrincipal < 1 || o.MaxSampled < 1 || o.SessionTTL < time.Minute || o.SessionIdle < time.Minute ||
		o.SampleEvery < 100*time.Millisecond || o.Window < o.SampleEvery {
		return nil, fmt.Errorf("console: limits out of range: sessions %d (>=1), per principal %d (>=1), sampled queues %d (>=1), session TTL %v (>=1m), idle %v (>=1m), sample every %v (>=100ms), window %v (>= sample interval)",
			o.MaxSessions, o.MaxPerPrincipal, o.MaxSampled, o.SessionTTL, o.SessionIdle, o.SampleEvery, o.Window)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	static, err := fs.Sub(webFS, "web/static")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{o: o, pages: pages, static: http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(static))), cookie: cookieFor(o.NodeID)}
	c.sessions = newSessions(sessionLimits{max: o.MaxSessions, perPrincipal: o.MaxPerPrincipal, ttl: o.SessionTTL, idle: o.SessionIdle}, o.Now)
	c.samples = newSampler(o.MaxSampled, int(o.Window/o.SampleEvery)+1, o.Now)
	c.routes()
	return c, nil
}

// ServeHTTP serves everything under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Pages load nothing from elsewhere and are never framed.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !c.hostAllowed(r.Host) {
		http.Error(w, fmt.Sprintf("console: host %q is not one this node serves its console under: use its IP address or localhost, "+
			"or name the host with --console-hosts (docs/console.md)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// Run samples queue statistics and this node's metrics every SampleEvery
// until ctx ends, then closes every session's client.
func (c *Console) Run(ctx context.Context) {
	t := time.NewTicker(c.o.SampleEvery)
	defer t.Stop()
	defer c.close()
	for {
		c.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Console) close() {
	c.sessions.closeAll()
	c.anonMu.Lock()
	defer c.anonMu.Unlock()
	c.closed = true
	if c.anon != nil {
		_ = c.anon.Close()
		c.anon = nil
	}
}

// anonClient is the client of callers who did not log in, dialed once.
func (c *Console) anonClient(ctx context.Context) (*client.Client, error) {
	c.anonMu.Lock()
	defer c.anonMu.Unlock()
	if c.anon != nil {
		return c.anon, nil
	}
	if c.closed {
		return nil, errors.New("console: stopping")
	}
	cl, err := c.o.Dial(ctx, "")
	if err != nil {
		return nil, err
	}
	c.anon = cl
	return cl, nil
}
