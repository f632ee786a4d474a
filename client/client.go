package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/bufpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// minRefreshGap rate-limits shard map refreshes triggered by errors, so a
// cluster in the middle of an election is not hammered by every caller.
const minRefreshGap = 200 * time.Millisecond

// anyShard routes a call to any node.
const anyShard = -1

// Client talks to a raftq cluster. It is safe for concurrent use.
type Client struct {
	cfg   config
	seeds []string

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool

	smap   atomic.Pointer[shardMap]
	rr     atomic.Uint64 // round robin over nodes
	recvRR atomic.Uint64 // round robin over shard leaders for receives

	streams sync.Map // coalesceKey -> *sendStream

	refreshMu   sync.Mutex
	lastRefresh time.Time // guarded by refreshMu
}

// Dial connects to the cluster through any of seeds ("host:port") and loads
// the shard map. It fails if no seed answers before ctx ends.
func Dial(ctx context.Context, seeds []string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("raftq dial: %w", err)
		}
	}
	clean := make([]string, 0, len(seeds))
	for _, s := range seeds {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(clean, s) {
			clean = append(clean, s)
		}
	}
	if len(clean) == 0 {
		return nil, fmt.Errorf("raftq dial: %w", invalid("no seed addresses"))
	}
	c := &Client{cfg: cfg, seeds: clean, conns: make(map[string]*grpc.ClientConn)}
	c.smap.Store(&shardMap{nodes: clean})
	if err := c.refresh(ctx, true); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("raftq dial %s: %w", strings.Join(clean, ","), err)
	}
	return c, nil
}

// Close closes every connection. Calls in progress fail.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for addr, cc := range c.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	clear(c.conns)
	return errors.Join(errs...)
}

// ShardCount is the cluster's number of data shards (fixed at bootstrap).
func (c *Client) ShardCount() uint32 { return c.smap.Load().count }

// conn returns the (lazily created) connection to addr.
func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("raftq: client closed")
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	// A node that died without closing its sockets (a killed host or
	// container, a partition) would hold a call for gRPC's default 20 s
	// connect timeout; fail the attempt sooner so the retry moves on.
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(c.cfg.creds), grpc.WithConnectParams(fastConnect()), bufpool.DialOption()}, c.cfg.dialOpts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("raftq: connect %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// refresh reloads the shard map from the first node that answers. Unless
// forced it does nothing when the map was refreshed within minRefreshGap.
func (c *Client) refresh(ctx context.Context, force bool) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if !force && time.Since(c.lastRefresh) < minRefreshGap {
		return nil
	}
	c.lastRefresh = time.Now()
	var errs []error
	var empty *raftqv1.ShardMapResponse
	for _, addr := range nodeList(c.smap.Load().nodes, c.seeds) {
		cc, err := c.conn(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout)
		resp, err := raftqv1.NewClusterClient(cc).ShardMap(actx, &raftqv1.ShardMapRequest{})
		cancel()
		if err == nil && resp.GetShardCount() == 0 {
			// A node that is starting has no map yet; another may. Taking
			// its empty answer would drop every leader this client knew
			// (the refresh after a failed call often asks the very node
			// that is restarting).
			empty = resp
			continue
		}
		if err == nil {
			c.smap.Store(newShardMap(resp, c.seeds))
			c.cfg.logger.Debug("raftq shard map", "from", addr, "version", resp.GetVersion(), "shards", resp.GetShardCount())
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, fromStatus(err)))
		if ctx.Err() != nil {
			break
		}
	}
	if empty != nil {
		// Nobody has a map (a cluster still placing its shards): an empty
		// one replaces only an empty one.
		if c.smap.Load().count == 0 {
			c.smap.Store(newShardMap(empty, c.seeds))
		}
		return nil
	}
	return fmt.Errorf("load shard map: %w: %w", ErrUnavailable, errors.Join(errs...))
}

// loadMap reloads the shard map, at most every minRefreshGap, while it has
// no shards. A client dialled while the cluster was still placing its
// shards gets an empty map; nothing else reloads it until a call fails, and
// with no shards every send goes to any node unrouted and uncoalesced, which
// works but costs several times the CPU per message for as long as the
// client lives.
func (c *Client) loadMap(ctx context.Context) {
	if c.smap.Load().count > 0 {
		return
	}
	if err := c.refresh(ctx, false); err != nil {
		c.cfg.logger.Debug("raftq shard map refresh failed", "err", err)
	}
}

// pick chooses the node for an attempt: the shard's leader when known and not
// the node to avoid, else the next node in round-robin order.
func (c *Client) pick(shard int, avoid string) string {
	m := c.smap.Load()
	if l := m.leader(shard); l != "" && l != avoid {
		return l
	}
	nodes := m.nodes
	for range nodes {
		a := nodes[c.rr.Add(1)%uint64(len(nodes))]
		if a != avoid || len(nodes) == 1 {
			return a
		}
	}
	return c.seeds[0]
}

// noteLeader records a leader hint for shard.
func (c *Client) noteLeader(shard int, addr string) {
	for {
		old := c.smap.Load()
		n := old.withLeader(shard, addr, c.seeds)
		if n == old || c.smap.CompareAndSwap(old, n) {
			return
		}
	}
}

// learnLeaders notes the shard leaders a node forwarded a successful call
// to (ShardLeaderTrailer). Nodes forward rather than refuse, so this is how
// a cached leader that lost its term, in a failover or a hand-off to the
// preferred replica, gets replaced: until then every call took an extra
// hop through it (docs/benchmarks.md, "Calls through a follower").
func (c *Client) learnLeaders(trailer metadata.MD) {
	for _, v := range trailer.Get(ShardLeaderTrailer) {
		id, hint, ok := strings.Cut(v, ":")
		if !ok {
			continue
		}
		shard, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			continue
		}
		if _, addr, err := parseHint(hint); err == nil {
			c.noteLeader(int(shard), addr)
		}
	}
}

// rpc is one attempt of a call on a connection.
type rpc func(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) error

// callSpec says where a call goes and how it may be retried.
type callSpec struct {
	shard int           // anyShard or a shard id
	safe  bool          // retrying after an ambiguous failure cannot duplicate work
	extra time.Duration // added to the per-attempt timeout (long-poll wait)
}

// invoke runs fn with routing and retries (see the package comment).
func (c *Client) invoke(ctx context.Context, spec callSpec, fn rpc) error {
	addr := c.pick(spec.shard, "")
	hinted := map[string]bool{}
	for attempt := 1; ; attempt++ {
		cc, err := c.conn(addr)
		if err != nil {
			return err
		}
		var header, trailer metadata.MD
		actx, cancel := context.WithTimeout(ctx, c.cfg.callTimeout+spec.extra)
		err = fn(actx, cc, grpc.Header(&header), grpc.Trailer(&trailer))
		cancel()
		if err == nil {
			c.learnLeaders(trailer)
			return nil
		}
		refused, hint := refusal(trailer, header)
		class := classify(status.Code(err), refused, hint, ctx.Err() != nil)
		if class == retryUnknown {
			// Only a node's refusal proves nothing was applied; other failures
			// are retried only where a repeat cannot duplicate work.
			class = noRetry
			if spec.safe {
				class = retryOther
			}
		}
		if class == noRetry {
			return fromStatus(err)
		}
		if attempt >= c.cfg.retry.MaxAttempts {
			return fmt.Errorf("%w (gave up after %d attempts)", fromStatus(err), attempt)
		}
		var sleep time.Duration
		if class == retryHinted {
			c.noteLeader(spec.shard, hint)
			if hinted[hint] || hint == addr {
				// The hint did not help last time: an election is under way.
				sleep = c.cfg.retry.backoff(attempt)
			}
			hinted[hint] = true
			c.cfg.logger.Debug("raftq retry at leader", "from", addr, "to", hint, "attempt", attempt, "err", err)
			addr = hint
		} else {
			sleep = c.cfg.retry.backoff(attempt)
			if rerr := c.refresh(ctx, false); rerr != nil {
				c.cfg.logger.Debug("raftq shard map refresh failed", "err", rerr)
			}
			c.cfg.logger.Debug("raftq retry", "from", addr, "attempt", attempt, "sleep", sleep, "err", err)
			addr = c.pick(spec.shard, addr)
		}
		if serr := sleepCtx(ctx, sleep); serr != nil {
			return fmt.Errorf("%w (retry stopped: %v)", fromStatus(err), serr)
		}
	}
}

// sleepCtx sleeps d unless ctx ends first, or would end before d passes.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return context.DeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
