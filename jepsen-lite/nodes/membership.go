package nodes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
)

// Members lists the slots that hold a cluster member now (running or
// not): every slot but the spares. Clients, faults and the final phase
// use these; a retired node's slot is a spare again.
func (c *Cluster) Members() []int {
	var out []int
	for i := range c.Nodes {
		if !c.isSpare(i) {
			out = append(out, i)
		}
	}
	return out
}

// Spares lists the slots free for a new node.
func (c *Cluster) Spares() []int {
	var out []int
	for i := range c.Nodes {
		if c.isSpare(i) {
			out = append(out, i)
		}
	}
	return out
}

func (c *Cluster) isSpare(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.spare
}

// joinWait bounds how long a new node may take to serve and be listed
// alive by the cluster.
const joinWait = 60 * time.Second

// Join starts a new node in spare slot i under a fresh id, with an empty
// data directory, --bootstrap-expect 0 and --join, as docs/operations.md
// ("Replace a dead node") says an operator does, and returns its id once
// it serves and a member lists it alive in meta.
func (c *Cluster) Join(ctx context.Context, i int) (string, error) {
	n := c.Nodes[i]
	n.mu.Lock()
	if !n.spare {
		n.mu.Unlock()
		return "", fmt.Errorf("slot %d holds %s: not a spare", i, n.ID)
	}
	c.lastID++
	c.name(n, "n"+strconv.Itoa(c.lastID))
	n.spare, n.joiner, n.repair, n.offset = false, true, false, 0
	id := n.ID
	n.mu.Unlock()
	if err := c.Start(i, 0); err != nil {
		return id, err
	}
	wctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	if err := c.WaitServing(wctx, i); err != nil {
		return id, err
	}
	var last error
	for {
		view, err := c.View(wctx)
		if err == nil {
			v, ok := view[id]
			if ok && v.Alive && v.Meta != "" {
				return id, nil
			}
			err = fmt.Errorf("%s listed as %+v", id, v)
		}
		last = err
		select {
		case <-wctx.Done():
			return id, fmt.Errorf("%s not an alive meta member within %v: %w", id, joinWait, last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Retire stops the node in slot i (SIGTERM, kill -9 after 15 s), as an
// operator stops a node once it is retired, and makes the slot a spare:
// its id is refused for good, so the slot's next node gets a new one and
// a new data directory (the old one stays for the post-mortem).
func (c *Cluster) Retire(ctx context.Context, i int) error {
	if c.Running(i) {
		if err := c.Stop(ctx, i); err != nil {
			return err
		}
	}
	n := c.Nodes[i]
	n.mu.Lock()
	n.spare = true
	n.mu.Unlock()
	return nil
}

// View is the cluster's membership as the first member that answers
// Cluster.Nodes sees it, by node id.
func (c *Cluster) View(ctx context.Context) (map[string]nemesis.NodeView, error) {
	var last error
	for _, i := range c.Members() {
		if !c.Running(i) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := raftqv1.NewClusterClient(c.conns[i]).Nodes(cctx, &raftqv1.NodesRequest{})
		cancel()
		if err != nil {
			last = fmt.Errorf("nodes via %s: %w", c.Nodes[i].ID, err)
			continue
		}
		out := map[string]nemesis.NodeView{}
		for _, n := range resp.GetNodes() {
			out[n.GetNodeId()] = nemesis.NodeView{Alive: n.GetState() == "alive", Meta: n.GetMeta(),
				Replicas: len(n.GetReplicas()), Draining: n.GetDraining(), Retired: n.GetRetired()}
		}
		return out, nil
	}
	if last == nil {
		last = errors.New("no member running")
	}
	return nil, last
}

// MetaLeader is the slot of the meta leader as the first member that
// answers sees it, or -1.
func (c *Cluster) MetaLeader(ctx context.Context) int {
	for _, i := range c.Members() {
		if !c.Running(i) {
			continue
		}
		st, err := c.Status(ctx, i)
		if err != nil || st.GetMetaLeaderId() == "" {
			continue
		}
		return c.Index(st.GetMetaLeaderId())
	}
	return -1
}

// Replace asks for (or, asked again, reports the progress of) the drain
// of old to new (Cluster.ReplaceNode) through any running member but
// old: the call is passed to the meta leader.
func (c *Cluster) Replace(ctx context.Context, old, new string) (nemesis.Drain, error) {
	return c.drain(ctx, old, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.NodeDrainResponse, error) {
		return raftqv1.NewClusterClient(cc).ReplaceNode(ctx, &raftqv1.ReplaceNodeRequest{OldNodeId: old, NewNodeId: new})
	})
}

// Remove is Replace for Cluster.RemoveNode.
func (c *Cluster) Remove(ctx context.Context, id string) (nemesis.Drain, error) {
	return c.drain(ctx, id, func(ctx context.Context, cc *grpc.ClientConn) (*raftqv1.NodeDrainResponse, error) {
		return raftqv1.NewClusterClient(cc).RemoveNode(ctx, &raftqv1.RemoveNodeRequest{NodeId: id})
	})
}

// drain makes one drain call through the first running member (other
// than the node drained) that answers; a definite refusal
// (FAILED_PRECONDITION, NOT_FOUND, ...) is returned at once.
func (c *Cluster) drain(ctx context.Context, leaving string, call func(context.Context, *grpc.ClientConn) (*raftqv1.NodeDrainResponse, error)) (nemesis.Drain, error) {
	var last error
	for _, i := range c.Members() {
		if c.Nodes[i].ID == leaving || !c.Running(i) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := call(cctx, c.conns[i])
		cancel()
		if err == nil {
			return nemesis.Drain{Done: resp.GetDone(), Moving: resp.GetMoving(), Left: len(resp.GetReplicas())}, nil
		}
		last = fmt.Errorf("via %s: %w", c.Nodes[i].ID, err)
		if definite(err) {
			return nemesis.Drain{}, last
		}
	}
	if last == nil {
		last = errors.New("no member running")
	}
	return nemesis.Drain{}, last
}

// definite: the cluster refused the drain for a reason another node would
// give too (an unknown node, a node the cluster cannot spare).
func definite(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument:
		return true
	}
	return false
}
