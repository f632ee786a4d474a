// Package peer is the node-to-node protocol (peerpb): both its sides. The
// client (Client, Forward) carries a shard call to the node that leads the
// shard and asks members what only they know; the service (Service) serves
// those calls on the peer listener, through small interfaces the router
// and the cluster node implement, so this package imports neither.
package peer

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/internal/liveness"
	"github.com/raftq/raftq/peer/peerpb"
)

// LeaderTrailer is the gRPC trailer a node sets when it refuses a call
// because it does not lead the shard or group: "nodeID=grpcAddr" of the
// leader it knows, or empty. Its presence means the call certainly had no
// effect, so it is safe to retry elsewhere. Clients of the public API get
// the same trailer (server/errors.go).
const LeaderTrailer = "raftq-leader"

// The default probe finds a dead path to a peer within about a second: a
// probe is a gRPC health check, which a live node answers in well under a
// millisecond whatever its raft groups are doing, so a second of silence
// is not a slow node.
const (
	DefaultProbeAfter   = 250 * time.Millisecond
	DefaultProbeTimeout = time.Second
)

// Client holds one connection per peer address and the liveness watch on
// each. It is safe for concurrent use.
type Client struct {
	conns *connPool
}

// NewClient returns a client whose forwards are guarded by probe
// (internal/liveness); a zero probe takes DefaultProbeAfter and
// DefaultProbeTimeout.
//
// creds secure every connection (TLS between members); nil dials in
// plaintext.
func NewClient(probe liveness.Config, creds credentials.TransportCredentials) *Client {
	if probe == (liveness.Config{}) {
		probe = liveness.Config{After: DefaultProbeAfter, Timeout: DefaultProbeTimeout}
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return &Client{conns: newConnPool(probe, creds)}
}

// Close releases every connection.
func (c *Client) Close() error { return c.conns.close() }

// Conn returns the shared connection to addr. The router also uses it for
// control-plane writes it passes to the meta leader's client port.
func (c *Client) Conn(addr string) (*grpc.ClientConn, error) { return c.conns.conn(addr) }

func (c *Client) peer(addr string) (peerpb.PeerClient, error) {
	if addr == "" {
		return nil, fmt.Errorf("member has no peer address")
	}
	cc, err := c.conns.conn(addr)
	if err != nil {
		return nil, err
	}
	return peerpb.NewPeerClient(cc), nil
}

// Error means a forwarded shard call failed on the path to the node it
// was for, not at that node: the node could not be reached, or stopped
// answering while the call was out (see internal/liveness).
type Error struct {
	Shard          uint32
	Peer, PeerAddr string // the node the call was forwarded to
	// LeaderID and LeaderAddr are the best leader hint the forwarding node
	// had when the call failed (possibly Peer, or itself), with the
	// leader's client address; empty when it knew none.
	LeaderID, LeaderAddr string
	// Sent is true when the request may have reached Peer: its outcome is
	// unknown. False means it never left this node (no address, no
	// connection, Peer known to be silent): certainly not applied.
	Sent bool
	Err  error
}

func (e *Error) Error() string {
	if e.Sent {
		return fmt.Sprintf("shard %d: node %s (%s) stopped answering a forwarded call, which may have been applied: %v", e.Shard, e.Peer, e.PeerAddr, e.Err)
	}
	return fmt.Sprintf("shard %d: node %s (%s) unreachable, call not forwarded: %v", e.Shard, e.Peer, e.PeerAddr, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Forward sends one call for shard id to node peerID at its peer address
// addr. It returns the call's result; or, when the node refused it
// (UNAVAILABLE with LeaderTrailer), its error, refused and the trailer's
// value; or an *Error when the path to the node failed. The call leaves
// only over a connection that is up to a node not known to be silent, and
// is cancelled if the node falls silent while it is out; a call that
// legitimately waits (a long poll, a slow raft round) goes on while the
// node answers probes.
func Forward[T any](ctx context.Context, c *Client, id uint32, peerID, addr string,
	call func(context.Context, peerpb.PeerClient, ...grpc.CallOption) (T, error),
) (v T, refused bool, hint string, err error) {
	if addr == "" {
		return v, false, "", &Error{Shard: id, Peer: peerID, Err: fmt.Errorf("no peer address known")}
	}
	pc, err := c.conns.peer(addr)
	if err != nil {
		return v, false, "", &Error{Shard: id, Peer: peerID, PeerAddr: addr, Err: err}
	}
	if err := pc.live.Ready(ctx); err != nil {
		if ctx.Err() != nil {
			return v, false, "", ctx.Err()
		}
		return v, false, "", &Error{Shard: id, Peer: peerID, PeerAddr: addr, Err: err}
	}
	gctx, stop := pc.live.Guard(ctx)
	var trailer metadata.MD
	v, err = call(gctx, peerpb.NewPeerClient(pc.cc), grpc.Trailer(&trailer))
	silent := stop()
	if err == nil {
		pc.live.Heard()
		return v, false, "", nil
	}
	if silent != nil && ctx.Err() == nil {
		return v, false, "", &Error{Shard: id, Peer: peerID, PeerAddr: addr, Sent: true, Err: silent}
	}
	if vals, ok := trailer[LeaderTrailer]; ok && status.Code(err) == codes.Unavailable {
		pc.live.Heard()
		if len(vals) > 0 {
			hint = vals[0]
		}
		return v, true, hint, err
	}
	return v, false, "", err
}
