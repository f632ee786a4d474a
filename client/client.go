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
	"github.com/raftq/raftq/internal/liveness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// minRefreshGap rate-limits shard map refreshes triggered by errors, so a
// cluster in the middle of an election is not hammered by every caller.
const minRefreshGap = 200 * time.Millisecond

// anyShard routes a call to any node.
const anyShard = -1

// distrustFor is how long a node that just failed a call (it did not
// answer, could not be reached, or could not complete the call) is passed
// over while another node can be tried. Long enough that the retries of
// one failover do not come back to it, short enough that a node that
// recovered gets calls again at once: calls go to it again after this
// even if nothing proved it healthy.
const distrustFor = 2 * time.Second

// Client talks to a raftq cluster. It is safe for concurrent use.
type Client struct {
	cfg   config
	seeds []string

	mu       sync.Mutex
	conns    map[string]nodeConn
	closed   bool
	draining bool // Drain began: new work is refused

	inflight *inflight

	distrustMu sync.Mutex
	distrusted map[string]time.Time // addr -> until when it is passed over

	smap   atomic.Pointer[shardMap]
	rr     atomic.Uint64 // round robin over nodes
	recvRR atomic.Uint64 // round robin over shard leaders for receives

	streams sync.Map  // coalesceKey -> *sendStream
	holds   sendHolds // queues whose sends a node refused for a while (hold.go)

	refreshMu   sync.Mutex
	lastRefresh time.Time // guarded by refreshMu
}

// Dial connects to the cluster through any of seeds ("host:port") and loads
// the shard map. It tries the seeds in order, and again after a backoff
// while none answers (a cluster that is starting, a seed that refuses the
// connection), as a call's retries do: it fails with ErrUnavailable once
// ctx ends or the retry budget (WithRetry; by default 12 rounds over 3.3 to
// 6.6 s) is spent.
func Dial(ctx context.Context, seeds []string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o.apply(&cfg); err != nil {
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
	c := &Client{cfg: cfg, seeds: clean, conns: make(map[string]nodeConn), distrusted: make(map[string]time.Time), inflight: newInflight()}
	c.smap.Store(&shardMap{nodes: clean})
	for round := 1; ; round++ {
		err := c.refresh(ctx, true)
		if err == nil {
			return c, nil
		}
		if round >= cfg.retry.MaxAttempts || ctx.Err() != nil {
			_ = c.Close()
			return nil, fmt.Errorf("raftq dial %s: %w", strings.Join(clean, ","), err)
		}
		if serr := sleepCtx(ctx, cfg.retry.backoff(round)); serr != nil {
			_ = c.Close()
			return nil, fmt.Errorf("raftq dial %s: %w (retry stopped: %v)", strings.Join(clean, ","), err, serr)
		}
	}
}

// Close closes every connection at once. Calls and sends in progress fail:
// with ErrOutcomeUnknown if they had reached a node (they may have taken
// effect), else with ErrNotSent; both wrap ErrClosed. Flush or Drain first
// to let them finish.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for addr, nc := range c.conns {
		if err := nc.cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", addr, err))
		}
	}
	clear(c.conns)
	return errors.Join(errs...)
}

// ShardCount is the cluster's number of data shards (fixed at bootstrap).
func (c *Client) ShardCount() uint32 { return c.smap.Load().count }

// nodeConn is the connection to one node and the watch on its liveness.
type nodeConn struct {
	cc   *grpc.ClientConn
	live *liveness.Peer
}

// conn returns the (lazily created) connection to addr.
func (c *Client) conn(addr string) (nodeConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nodeConn{}, closedNotSent()
	}
	if nc, ok := c.conns[addr]; ok {
		return nc, nil
	}
	// A node that died without closing its sockets (a killed host or
	// container, a partition) would hold a call for gRPC's default 20 s
	// connect timeout; fail the attempt sooner so the retry moves on.
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(c.cfg.creds), grpc.WithConnectParams(fastConnect()),
		liveness.KeepaliveDialOption(), bufpool.DialOption()}, c.cfg.dialOpts...)
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nodeConn{}, fmt.Errorf("raftq: connect %s: %w", addr, err)
	}
	nc := nodeConn{cc: cc, live: liveness.New(cc, c.cfg.probe)}
	c.conns[addr] = nc
	return nc, nil
}

// attempt makes one call on addr's connection: sent only if the
// connection is up and the node not known to be silent, and cut short if
// the node falls silent while it is out. sent reports whether the call
// left the client; a node that stopped answering makes err UNAVAILABLE
// (outcome unknown).
//
// gate false skips the wait for a connection (the call waits for it, as
// far as gRPC's connect timeout): for loading the first shard map, when a
// client has nowhere else to go yet.
func (c *Client) attempt(ctx context.Context, addr string, timeout time.Duration, gate bool, fn func(ctx context.Context, cc *grpc.ClientConn) error) (sent bool, err error) {
	nc, err := c.conn(addr)
	if err != nil {
		return false, err
	}
	if gate {
		if err := nc.live.Ready(ctx); err != nil {
			if ctx.Err() != nil {
				return false, status.FromContextError(ctx.Err()).Err()
			}
			return false, status.Errorf(codes.Unavailable, "node %s: %v", addr, err)
		}
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gctx, stop := nc.live.Guard(actx)
	err = fn(gctx, nc.cc)
	silent := stop()
	switch {
	case err == nil:
		nc.live.Heard()
		c.trust(addr)
	case silent != nil && ctx.Err() == nil:
		err = status.Errorf(codes.Unavailable, "node %s stopped answering, the call may have been applied: %v", addr, silent)
	}
	return true, err
}

// distrust passes addr over for distrustFor (see pick).
func (c *Client) distrust(addr string) {
	c.distrustMu.Lock()
	c.distrusted[addr] = time.Now().Add(distrustFor)
	c.distrustMu.Unlock()
}

// trust ends addr's distrust: it answered.
func (c *Client) trust(addr string) {
	c.distrustMu.Lock()
	delete(c.distrusted, addr)
	c.distrustMu.Unlock()
}

// trusted reports whether addr is not being passed over.
func (c *Client) trusted(addr string) bool {
	c.distrustMu.Lock()
	defer c.distrustMu.Unlock()
	until, ok := c.distrusted[addr]
	if ok && time.Now().After(until) {
		delete(c.distrusted, addr)
		return true
	}
	return !ok
}

// refresh reloads the shard map from the first node that answers, asking
// distrusted nodes last. Unless forced it does nothing when the map was
// refreshed within minRefreshGap. Forced (Dial), a seed's connection is
// waited for as long as gRPC's connect timeout rather than the liveness
// probe's: the client has no other node to go to yet.
func (c *Client) refresh(ctx context.Context, force bool) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if !force && time.Since(c.lastRefresh) < minRefreshGap {
		return nil
	}
	c.lastRefresh = time.Now()
	var errs []error
	var empty *raftqv1.ShardMapResponse
	nodes := nodeList(c.smap.Load().nodes, c.seeds)
	slices.SortStableFunc(nodes, func(a, b string) int {
		return cmpBool(!c.trusted(a), !c.trusted(b))
	})
	for _, addr := range nodes {
		var resp *raftqv1.ShardMapResponse
		_, err := c.attempt(ctx, addr, c.cfg.callTimeout, !force, func(ctx context.Context, cc *grpc.ClientConn) (err error) {
			resp, err = raftqv1.NewClusterClient(cc).ShardMap(ctx, &raftqv1.ShardMapRequest{})
			return err
		})
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
		if ctx.Err() == nil {
			c.distrust(addr)
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

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
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

// pick chooses the node for an attempt: the shard's leader when known,
// trusted and not the node to avoid, else the next trusted node in
// round-robin order, else (every node distrusted) the next one.
func (c *Client) pick(shard int, avoid string) string {
	m := c.smap.Load()
	if l := m.leader(shard); l != "" && l != avoid && c.trusted(l) {
		return l
	}
	nodes := m.nodes
	for range nodes {
		a := nodes[c.rr.Add(1)%uint64(len(nodes))]
		if a != avoid && c.trusted(a) {
			return a
		}
	}
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
// preferred replica, gets replaced: until then every call takes an extra
// hop through it.
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
	// answered, if set, is told which node answered the successful
	// attempt and its trailer.
	answered func(addr string, trailer metadata.MD)
	// admitted marks a call for work admitted before a Drain began (a
	// coalesced batch): it is made even while the client drains.
	admitted bool
	// sendTo names the queue of a Send or SendBatch call, whose
	// refusals with a retry time hold the queue's next sends (hold.go).
	sendTo string
}

// invoke runs fn with routing and retries (see the package comment).
func (c *Client) invoke(ctx context.Context, spec callSpec, fn rpc) error {
	if !spec.admitted {
		if err := c.admit(); err != nil {
			return err
		}
	}
	c.inflight.add()
	defer c.inflight.done()
	addr := c.pick(spec.shard, "")
	hinted := map[string]bool{}
	// unknown: an earlier attempt reached a node and got no answer, so the
	// call may have taken effect whatever later attempts are told.
	unknown := false
	for attempt := 1; ; attempt++ {
		var header, trailer metadata.MD
		var sent bool
		var err error
		hk, held := holdKey{queue: spec.sendTo, shard: spec.shard}, false
		// Not a retry after an attempt that may have been applied: only
		// the node can settle that (its dedup answer), not a hold.
		if c.cfg.sendHold && spec.sendTo != "" && !unknown && ctx.Err() == nil {
			var herr *Error
			if herr, held = c.holds.check(hk, time.Now()); held {
				err = herr
			}
		}
		if !held {
			sent, err = c.attempt(ctx, addr, c.cfg.callTimeout+spec.extra, true, func(ctx context.Context, cc *grpc.ClientConn) error {
				return fn(ctx, cc, grpc.Header(&header), grpc.Trailer(&trailer))
			})
			if err != nil && c.cfg.sendHold && spec.sendTo != "" {
				c.holds.noteRefusal(hk, err, time.Now())
			}
		}
		if err == nil {
			c.learnLeaders(trailer)
			if spec.answered != nil {
				spec.answered(addr, trailer)
			}
			return nil
		}
		if c.isClosed() {
			if sent || unknown {
				return closedInFlight()
			}
			return closedNotSent()
		}
		if _, ok := status.FromError(err); !ok && !sent {
			return err
		}
		refused, hint := refusal(trailer, header)
		// A call that never left the client was not applied anywhere.
		refused = refused || !sent
		unknown = unknown || (!refused && ambiguous(status.Code(err)))
		class := classify(status.Code(err), refused, hint, ctx.Err() != nil)
		if class == retryUnknown {
			// Only a refusal proves nothing was applied; other failures
			// are retried only where a repeat cannot duplicate work, at
			// the leader the node named if it named one.
			class = noRetry
			if spec.safe {
				class = retryOther
				if h := leaderHint(trailer, header); h != "" {
					class, hint = retryHinted, h
				}
			}
		}
		// A refusal for overload that says when to come back (a node short
		// of memory or disk, a quota) is retried then, within the budget:
		// nothing was applied.
		after, wait := RetryAfter(err)
		if class == noRetry && wait && ctx.Err() == nil {
			class = retryOther
		}
		if class == noRetry {
			return outcome(err, unknown)
		}
		if class == retryOther && !slotMoving(err) && !wait {
			// The node could not be reached, did not answer, knew no
			// leader, or could not finish the call: let the retries of
			// this and other calls try elsewhere first. (A slot moving
			// between shards is no fault of the node: the retry below
			// refreshes the map, whose slot table names the new owner.)
			c.distrust(addr)
		}
		if attempt >= c.cfg.retry.MaxAttempts {
			return fmt.Errorf("%w (gave up after %d attempts)", outcome(err, unknown), attempt)
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
			sleep = max(c.cfg.retry.backoff(attempt), after)
			if !held { // a held attempt went nowhere: the same node is as good
				if rerr := c.refresh(ctx, false); rerr != nil {
					c.cfg.logger.Debug("raftq shard map refresh failed", "err", rerr)
				}
				addr = c.pick(spec.shard, addr)
			}
			c.cfg.logger.Debug("raftq retry", "from", addr, "attempt", attempt, "sleep", sleep, "err", err)
		}
		if serr := sleepCtx(ctx, sleep); serr != nil {
			return fmt.Errorf("%w (retry stopped: %v)", outcome(err, unknown), serr)
		}
	}
}

// slotMovingText is in the message of the UNAVAILABLE a node answers when
// a keyed send's slot stayed sealed for a move between shards for as long
// as the node waits (router.SlotMovingText): nothing was written.
const slotMovingText = "is moving between shards; retry"

// slotMoving reports whether err is that refusal.
func slotMoving(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), slotMovingText)
}

// ambiguous reports whether a failed attempt that reached a node may
// have been applied: no answer came back, or not a definite one.
func ambiguous(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// outcome is a call's final error: the node's answer, marked
// ErrOutcomeUnknown when an attempt may have taken effect and the last
// error is not a definite answer that settles it.
func outcome(err error, unknown bool) error {
	err = fromStatus(err)
	// A RESOURCE_EXHAUSTED refusal (a quota, a full send queue, a hold)
	// comes before the node looks up a send's dedup key: it does not
	// settle an earlier attempt either.
	if c := status.Code(err); unknown && (ambiguous(c) || c == codes.ResourceExhausted) {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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
