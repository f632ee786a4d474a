package main

import (
	"context"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
)

// cluster is what a run needs of a backend's nodes beyond the nemesis's
// levers: client connections and the views the final phase compares. Both
// nodes.Cluster (local namespaces) and compose.Cluster implement it.
type cluster interface {
	nemesis.Cluster
	Conn(i int) *grpc.ClientConn
	// PeerConn reaches node i's peer port (peer/peerpb), for the final
	// phase's replica digests.
	PeerConn(i int) *grpc.ClientConn
	Addr(i int) string
	Index(id string) int
	Status(ctx context.Context, i int) (*raftqv1.StatusResponse, error)
	WaitHealthy(ctx context.Context) error
}
