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
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxSampled  = 50
	DefaultSampleEvery = 5 * time.Second
	DefaultWindow      = 10 * time.Minute
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
	// it in process for the rates of calls this node served and the
	// commit latency of proposals it led.
	Metrics http.Handler
	Logger  *slog.Logger

	MaxSessions int           // live sessions at most; default 64
	SessionTTL  time.Duration // a session ends this long after login; default 12 h
	MaxSampled  int           // queues sampled for plots at most; default 50
	SampleEvery time.Duration // default 5 s
	Window      time.Duration // what plots show; default 10 min
	Now         func() time.Time
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
}

// New checks o and builds a Console.
func New(o Options) (*Console, error) {
	if o.Dial == nil {
		return nil, errors.New("console: Options.Dial is required")
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = DefaultSessionTTL
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
	if o.MaxSessions < 1 || o.MaxSampled < 1 || o.SessionTTL < time.Minute || o.SampleEvery < 100*time.Millisecond || o.Window < o.SampleEvery {
		return nil, fmt.Errorf("console: limits out of range: sessions %d (>=1), sampled queues %d (>=1), session TTL %v (>=1m), sample every %v (>=100ms), window %v (>= sample interval)",
			o.MaxSessions, o.MaxSampled, o.SessionTTL, o.SampleEvery, o.Window)
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
	c := &Console{o: o, pages: pages, static: http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(static)))}
	c.sessions = newSessions(o.MaxSessions, o.SessionTTL, o.Now)
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
	cl, err := c.o.Dial(ctx, "")
	if err != nil {
		return nil, err
	}
	c.anon = cl
	return cl, nil
}
