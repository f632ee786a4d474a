// Package server implements the raftq gRPC services (api/raftqv1) on one
// node: it validates input, maps queue calls to shards through the router,
// forwards control-plane writes to the meta leader, and turns every failure
// into a precise gRPC status.
package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/cluster"
	"github.com/raftq/raftq/meta"
	"github.com/raftq/raftq/peer"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
)

// Node is the part of a cluster node the services use; *cluster.Node
// implements it.
type Node interface {
	router.Topology
	Meta() *meta.Store
	Members() []cluster.Member
	Repairer
	// Rebalance reports (and unless dryRun starts) the balance plan; only
	// on the meta leader (cluster/rebalance.go).
	Rebalance(dryRun bool) (cluster.RebalanceStatus, error)
	// SetShardCount grows (or with 0 reports) the shard count; only on
	// the meta leader (cluster/growshards.go).
	SetShardCount(ctx context.Context, count uint32, dryRun bool) (cluster.GrowStatus, error)
	// Backup gathers a backup from every group's leader (cluster.Node.Backup).
	Backup(ctx context.Context, info func(cluster.BackupInfo) error, send func(*peerpb.BackupChunk) error) error
}

// Events receives message events and receive timings for metrics;
// *metrics.Metrics implements it.
type Events interface {
	Count(queue, event string, n int)
	// ObserveReceive times a receive that returned messages: how long it
	// waited for one to be ready, and the claim after that.
	ObserveReceive(waited, claim time.Duration)
}

type nopEvents struct{}

func (nopEvents) Count(string, string, int)                   {}
func (nopEvents) ObserveReceive(time.Duration, time.Duration) {}

// Server holds the service implementations.
type Server struct {
	node   Node
	router *router.Router
	log    *slog.Logger
	events Events
	// receipts sign and check receipts (receipts.go); nil: receipts go
	// out unsigned and any well-formed one is taken (--insecure).
	receipts atomic.Pointer[ReceiptKeys]
	// refused: sends this node refused with a retry time, by queue
	// (admission.go).
	refused refusals
}

// SetReceiptKeys makes the node sign the receipts it hands out and settle
// only receipts one of keys signed; nil goes back to unsigned receipts.
// Safe while serving (a SIGHUP reload).
func (s *Server) SetReceiptKeys(keys *ReceiptKeys) { s.receipts.Store(keys) }

// New returns the services of one node. events may be nil.
func New(node Node, rt *router.Router, events Events, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.Default()
	}
	if events == nil {
		events = nopEvents{}
	}
	return &Server{node: node, router: rt, log: logger, events: events}
}

// Register adds every raftq client service to g, the client listener's
// server.
func (s *Server) Register(g *grpc.Server) {
	raftqv1.RegisterQueuesServer(g, &queues{Server: s})
	raftqv1.RegisterMessagesServer(g, &messages{Server: s})
	raftqv1.RegisterDeadLettersServer(g, &deadLetters{Server: s})
	raftqv1.RegisterClusterServer(g, &clusterSvc{Server: s})
	raftqv1.RegisterAccessServer(g, &accessSvc{Server: s})
	raftqv1.RegisterTenantsServer(g, &tenantsSvc{Server: s})
	raftqv1.RegisterSchedulesServer(g, &schedulesSvc{Server: s})
}

// Peer is the node-to-node service, for the peer listener's server (never
// the client listener's): it serves forwarded calls on this node's shards
// and reports their failures as the client services do.
func (s *Server) Peer() *peer.Service {
	return peer.NewService(s.node, s.router.Local(), s.toStatus)
}
