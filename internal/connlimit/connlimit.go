// Package connlimit caps the connections a gRPC server serves, the way a
// broker caps its clients: up to Max connections are served; calls on a
// connection past Max are refused with RESOURCE_EXHAUSTED, a message
// naming the limit and a retry hint, until a served connection closes;
// and past a hard Ceiling above Max a connection is closed as soon as it
// is accepted. A client past Max therefore learns why, while the
// connections it costs stay bounded.
package connlimit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/raftq/raftq/internal/ratelog"
)

// logEvery spaces the warnings about refused connections.
const logEvery = 10 * time.Second

// Options configures a Limiter.
type Options struct {
	// Node names this node in refusals.
	Node string
	// Flag names the setting of Max in messages, e.g. "--max-client-conns".
	Flag string
	// Max is the most connections served at once; 0: no cap (and no
	// ceiling).
	Max int
	// Ceiling is the most connections open at once, served or not, those
	// still in their TLS handshake included. 0: DefaultCeiling(Max);
	// negative: none.
	Ceiling int
	// Retry is the wait a refusal suggests (google.rpc.RetryInfo);
	// default 1 s.
	Retry time.Duration
	// Exempt reports methods served on any connection, e.g. health
	// checks: an orchestrator's probe must not fail because clients
	// filled the node.
	Exempt func(fullMethod string) bool
	// AlwaysAccept reports connections accepted past the ceiling, e.g.
	// the node's own health probe over loopback.
	AlwaysAccept func(remote net.Addr) bool
	Logger       *slog.Logger
	// Opened moves a count of open connections (a metric) by delta, and
	// Refused counts a connection refused at "limit" (past Max) or
	// "ceiling"; either may be nil.
	Opened  func(delta int)
	Refused func(at string)
}

// DefaultCeiling is the ceiling above max: a tenth more, at least 16.
// Connections past max cost the node their buffers while they learn why
// they are refused; the ceiling bounds that, and a client leaking
// connections reaches it only after its refusals were logged.
func DefaultCeiling(limit int) int { return limit + max(limit/10, 16) }

// Limiter counts and caps the connections of one gRPC server and its
// listener. The zero value is not usable; see New.
type Limiter struct {
	opts    Options
	ceiling int // 0: none

	served atomic.Int64 // connections served (admitted under Max)
	open   atomic.Int64 // connections accepted and not closed (Ceiling)

	refusedLimit, refusedCeiling atomic.Uint64
	limitLog, ceilingLog         *ratelog.Limiter
}

// New returns a Limiter for opts.
func New(opts Options) *Limiter {
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Limiter{opts: opts, limitLog: ratelog.New(logEvery), ceilingLog: ratelog.New(logEvery)}
	switch {
	case opts.Max <= 0 || opts.Ceiling < 0:
	case opts.Ceiling == 0:
		l.ceiling = DefaultCeiling(opts.Max)
	default:
		l.ceiling = max(opts.Ceiling, opts.Max)
	}
	return l
}

// Stats is what a Limiter counted.
type Stats struct {
	// Open is the connections accepted and not closed; Served, those
	// served under Max.
	Open, Served int
	// RefusedLimit counts connections opened past Max; RefusedCeiling,
	// connections closed on accept at the ceiling.
	RefusedLimit, RefusedCeiling uint64
}

// Stats reports the counts.
func (l *Limiter) Stats() Stats {
	return Stats{Open: int(l.open.Load()), Served: int(l.served.Load()),
		RefusedLimit: l.refusedLimit.Load(), RefusedCeiling: l.refusedCeiling.Load()}
}

// Listener applies the ceiling to ln: a connection accepted while the
// ceiling's worth are open is closed at once, so its client fails fast
// and backs off instead of waiting in the kernel's backlog for a
// connect timeout.
func (l *Limiter) Listener(ln net.Listener) net.Listener {
	return &ceilingListener{Listener: ln, l: l}
}

// ServerOptions count the server's connections and refuse the calls of
// those past Max.
func (l *Limiter) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.StatsHandler(handler{l}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := l.check(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := l.check(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

type ceilingListener struct {
	net.Listener
	l *Limiter
}

func (cl *ceilingListener) Accept() (net.Conn, error) {
	l := cl.l
	for {
		c, err := cl.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Only this loop adds to open, so the count cannot overshoot.
		n := l.open.Add(1)
		if l.ceiling > 0 && n > int64(l.ceiling) && (l.opts.AlwaysAccept == nil || !l.opts.AlwaysAccept(c.RemoteAddr())) {
			l.open.Add(-1)
			l.refusedCeiling.Add(1)
			if l.opts.Refused != nil {
				l.opts.Refused("ceiling")
			}
			if ok, skipped := l.ceilingLog.Allow(time.Now()); ok {
				l.opts.Logger.Warn(fmt.Sprintf("client connection closed on accept: the node holds %d connections, the ceiling above %s %d", l.ceiling, l.opts.Flag, l.opts.Max),
					"remote", c.RemoteAddr().String(), "refused_unlogged", skipped)
			}
			_ = c.Close()
			continue
		}
		return &countedConn{Conn: c, l: l}, nil
	}
}

// countedConn leaves the count of open connections when closed.
type countedConn struct {
	net.Conn
	l    *Limiter
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// conn is one gRPC connection's place under Max.
type conn struct {
	remote net.Addr
	// fast is served, readable without the lock by every call.
	fast atomic.Bool

	mu     sync.Mutex
	served bool
	ended  bool
}

// take serves c if it is not already and a place is free.
func (l *Limiter) take(c *conn) bool {
	if c.fast.Load() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.served:
		return true
	case c.ended:
		// A call still starting on a connection that is gone must not
		// take a place nobody would give back.
		return false
	}
	for {
		n := l.served.Load()
		if n >= int64(l.opts.Max) {
			return false
		}
		if l.served.CompareAndSwap(n, n+1) {
			c.served = true
			c.fast.Store(true)
			return true
		}
	}
}

func (l *Limiter) end(c *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.served {
		c.served = false
		l.served.Add(-1)
	}
}

// check refuses a call on a connection past Max, unless a place has freed
// since: then the connection is served from now on.
func (l *Limiter) check(ctx context.Context, method string) error {
	if l.opts.Max <= 0 || (l.opts.Exempt != nil && l.opts.Exempt(method)) {
		return nil
	}
	c, ok := ctx.Value(connKey{}).(*conn)
	if !ok || l.take(c) {
		return nil
	}
	msg := fmt.Sprintf("node %s has %d client connections, its limit (%s %d): calls on this connection are refused until one of them closes; retry, or use another node",
		l.opts.Node, l.opts.Max, l.opts.Flag, l.opts.Max)
	st, err := status.New(codes.ResourceExhausted, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(l.opts.Retry)})
	if err != nil {
		return status.Error(codes.ResourceExhausted, msg)
	}
	return st.Err()
}

type connKey struct{}

// handler is the stats.Handler that sees every connection begin and end.
// gRPC derives every call's context from the one TagConn returns.
type handler struct{ l *Limiter }

func (h handler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &conn{remote: info.RemoteAddr})
}

func (h handler) HandleConn(ctx context.Context, s stats.ConnStats) {
	c, ok := ctx.Value(connKey{}).(*conn)
	if !ok {
		return
	}
	l := h.l
	switch s.(type) {
	case *stats.ConnBegin:
		if l.opts.Opened != nil {
			l.opts.Opened(1)
		}
		if l.opts.Max <= 0 || l.take(c) {
			return
		}
		l.refusedLimit.Add(1)
		if l.opts.Refused != nil {
			l.opts.Refused("limit")
		}
		if ok, skipped := l.limitLog.Allow(time.Now()); ok {
			l.opts.Logger.Warn(fmt.Sprintf("client connection past %s %d: its calls are refused until a served connection closes", l.opts.Flag, l.opts.Max),
				"remote", addr(c.remote), "refused_unlogged", skipped)
		}
	case *stats.ConnEnd:
		if l.opts.Opened != nil {
			l.opts.Opened(-1)
		}
		l.end(c)
	}
}

func (handler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (handler) HandleRPC(context.Context, stats.RPCStats)                       {}

func addr(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
