package main

import (
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/raftq/raftq/internal/connlimit"
	"github.com/raftq/raftq/metrics"
)

// Connection and stream limits of the client and peer ports
// (docs/listeners.md, "Connection and stream limits"). The raft port's
// are raftmux's (raftmux/limits.go).
const (
	// clientMaxIdle closes a client connection that has had no call in
	// flight for this long (a GOAWAY; the client dials again for its next
	// call). It gives back the place under --max-client-conns of a
	// client that keeps a connection it no longer uses. A parked long
	// poll is a call in flight, so a consumer waiting for messages is
	// never idle.
	clientMaxIdle = 5 * time.Minute
	// connMaxAge is how long a connection, client or peer, takes new
	// calls (gRPC adds ±10 % so connections opened together do not all
	// reconnect together). Then gRPC tells the client to open a new one,
	// with a new TLS handshake, so a certificate or CA rotated with
	// SIGHUP is in use on every connection within it, and clients that
	// reach nodes through one address spread over nodes added since.
	//
	// There is no MaxConnectionAgeGrace (gRPC's default: unbounded): the
	// calls in flight at the age finish on the old connection, and it
	// closes with the last. A grace would cut whatever outlasts it, and
	// calls on both ports may: a long poll waits up to 20 s
	// (peer.MaxWait), but a Backup stream on the client port and each
	// BackupPiece stream on the peer port last as long as their data
	// takes to stream, so any grace short enough to matter would break a
	// large backup off midway. Each call stays bounded by its own
	// deadline, wait or size.
	connMaxAge = 30 * time.Minute
)

// Ranges of the limit flags (config.finish).
const (
	// minStreamsPerConn: the Go client sends every call to a node over
	// one connection, so a consumer's acks would queue behind its own
	// long polls under a cap this low.
	minStreamsPerConn = 16
	maxStreamsPerConn = 1 << 20
	// minRaftConns: below it even a small cluster's own raft traffic
	// could be refused.
	minRaftConns = 64
)

// connAging closes connections idle for idle (0: never) and has them
// replaced after age, with no grace (connMaxAge).
func connAging(idle, age time.Duration) grpc.ServerOption {
	return grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle, MaxConnectionAge: age})
}

// clientLimits are the client port's connection and stream limits.
func clientLimits(lim *connlimit.Limiter, maxStreams int) []grpc.ServerOption {
	opts := append(lim.ServerOptions(), connAging(clientMaxIdle, connMaxAge))
	if maxStreams > 0 {
		// A client past it waits for a stream to finish before it starts
		// another: gRPC's flow control, not an error.
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(maxStreams)))
	}
	return opts
}

// peerLimits are the peer port's. It has no stream cap: a node forwards
// each of its clients' parked long polls to every shard's leader as a
// ShardWait (router/receive.go, waitAny), all over its one connection to
// each peer, so a connection may carry up to --max-parked-receives times
// the shards its peer leads, and a cap would hold forwarded waits behind
// each other. What a peer connection carries is bounded where it enters
// the cluster (the client port's limits, --max-parked-receives), and only
// members connect to the peer port. No idle limit either: a node keeps
// one connection per peer, and closing it would buy nothing.
func peerLimits() []grpc.ServerOption {
	return []grpc.ServerOption{connAging(0, connMaxAge)}
}

// newClientLimiter is the client port's --max-client-conns.
func newClientLimiter(cfg *config, met *metrics.Metrics, log *slog.Logger) *connlimit.Limiter {
	return connlimit.New(connlimit.Options{
		Node: cfg.NodeID, Flag: "--max-client-conns", Max: cfg.MaxClientConns, Logger: log,
		// A node's health (the container probe, clients' liveness
		// probes) must be answered however many clients it has.
		Exempt: func(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") },
		// raftq-node probe dials over loopback: an orchestrator must not
		// restart a node because clients filled its port.
		AlwaysAccept: isLoopback,
		Opened:       met.ClientConns,
		Refused:      met.ClientConnRefused,
	})
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
