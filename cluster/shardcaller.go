package cluster

import (
	"context"
	"errors"

	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
)

// ShardCaller proposes commands on data shards and reads from them at
// their leaders, wherever those are; router.Router implements it. The
// router is built on the node (it is the router's Topology), so the node
// is handed it afterwards (SetShardCaller); duties that need it wait
// until then.
type ShardCaller interface {
	Apply(ctx context.Context, id uint32, cmd *fsmpb.Command) (*fsmpb.Result, error)
	Read(ctx context.Context, req *peerpb.ShardReadRequest) (*peerpb.ShardReadResponse, error)
	// Send enqueues messages on a queue as a client's send does (the
	// cron firer's messages, cron.go).
	Send(ctx context.Context, queue string, msgs []*fsmpb.NewMessage) ([]router.Sent, error)
}

type shardCallerBox struct{ ShardCaller }

// SetShardCaller hands the node the router it forwards shard calls with.
func (n *Node) SetShardCaller(c ShardCaller) { n.caller.Store(&shardCallerBox{c}) }

var errNoShardCaller = errors.New("the node's router is not set up yet")

func (n *Node) shardCaller() (ShardCaller, error) {
	b := n.caller.Load()
	if b == nil {
		return nil, errNoShardCaller
	}
	return b.ShardCaller, nil
}
