package compose

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// Cluster gives the nemesis and the final phase the compose project's
// containers as node slots 0..2 (services n1..n3).
type Cluster struct {
	P          *Project
	containers []string
	conns      []*grpc.ClientConn
	peerConns  []*grpc.ClientConn
}

// NewCluster resolves the containers and dials the published gRPC ports.
func NewCluster(ctx context.Context, p *Project) (*Cluster, error) {
	c := &Cluster{P: p}
	creds, member, err := p.credentials(ctx)
	if err != nil {
		return nil, err
	}
	for i := range Nodes {
		id, err := p.Container(ctx, i)
		if err != nil {
			c.Close()
			return nil, err
		}
		cc, err := dial(p.Addr(i), creds)
		if err != nil {
			c.Close()
			return nil, err
		}
		pc, err := dial(p.PeerAddr(i), member)
		if err != nil {
			_ = cc.Close()
			c.Close()
			return nil, err
		}
		c.containers = append(c.containers, id)
		c.conns = append(c.conns, cc)
		c.peerConns = append(c.peerConns, pc)
	}
	return c, nil
}

// Close closes the client and peer connections.
func (c *Cluster) Close() {
	for _, cc := range append(c.conns, c.peerConns...) {
		_ = cc.Close()
	}
}

func (c *Cluster) Size() int { return Nodes }

// Members is every node: the compose cluster has no spare slots.
func (c *Cluster) Members() []int {
	out := make([]int, Nodes)
	for i := range out {
		out[i] = i
	}
	return out
}

func (c *Cluster) NodeID(i int) string         { return service(i) }
func (c *Cluster) Addr(i int) string           { return c.P.Addr(i) }
func (c *Cluster) Conn(i int) *grpc.ClientConn { return c.conns[i] }

// PeerConn is the connection to node i's peer port.
func (c *Cluster) PeerConn(i int) *grpc.ClientConn { return c.peerConns[i] }
func (c *Cluster) Offset(int) time.Duration        { return 0 }
func (c *Cluster) docker(ctx context.Context, args ...string) error {
	_, err := run(ctx, nil, "docker", args...)
	return err
}

// Index maps a node id ("n2") to its slot, or -1.
func (c *Cluster) Index(id string) int {
	for i := range Nodes {
		if service(i) == id {
			return i
		}
	}
	return -1
}

// Running reports whether node i's container runs (paused counts).
func (c *Cluster) Running(i int) bool {
	// No ctx in the nemesis interface here; dockerTimeout bounds it.
	out, err := run(context.Background(), nil, "docker", "inspect", "--format", "{{.State.Running}}", c.containers[i])
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// Start starts node i's stopped container. The compose backend has no
// clock skew: the compose file does not pass RAFTQ_CLOCK_OFFSET through.
func (c *Cluster) Start(i int, offset time.Duration) error {
	if offset != 0 {
		return fmt.Errorf("compose backend: clock offset %v not supported", offset)
	}
	if c.Running(i) {
		return nil
	}
	return c.docker(context.Background(), "start", c.containers[i])
}

// Kill sends SIGKILL (docker kill; unpause first so a paused node dies
// too) and waits for the container to stop. The compose restart policy
// (unless-stopped) treats docker kill as a manual stop, so it stays down
// until Start.
func (c *Cluster) Kill(ctx context.Context, i int) error {
	_ = c.docker(ctx, "unpause", c.containers[i])
	if err := c.docker(ctx, "kill", c.containers[i]); err != nil {
		return err
	}
	return c.waitStopped(ctx, i)
}

// Stop is docker stop: SIGTERM, then SIGKILL after 15 s.
func (c *Cluster) Stop(ctx context.Context, i int) error {
	return c.docker(ctx, "stop", "-t", "15", c.containers[i])
}

func (c *Cluster) waitStopped(ctx context.Context, i int) error {
	for c.Running(i) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to stop: %w", service(i), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// Pause and Resume freeze and thaw node i's container (cgroup freezer).
func (c *Cluster) Pause(i int) error {
	return c.docker(context.Background(), "pause", c.containers[i])
}
func (c *Cluster) Resume(i int) error {
	return c.docker(context.Background(), "unpause", c.containers[i])
}

// WaitServing polls node i's gRPC health through its published port.
func (c *Cluster) WaitServing(ctx context.Context, i int) error {
	hc := healthpb.NewHealthClient(c.conns[i])
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not serving: %w (last: %v)", service(i), ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Status asks node i for its view of the cluster.
func (c *Cluster) Status(ctx context.Context, i int) (*raftqv1.StatusResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := raftqv1.NewClusterClient(c.conns[i]).Status(cctx, &raftqv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", service(i), err)
	}
	return st, nil
}

// Leaders asks every node for shard leaders: shard -> slot; the first
// answer per shard wins.
func (c *Cluster) Leaders(ctx context.Context) map[uint32]int {
	out := map[uint32]int{}
	for i := range Nodes {
		st, err := c.Status(ctx, i)
		if err != nil {
			continue
		}
		for _, s := range st.GetShards() {
			if _, ok := out[s.GetShardId()]; !ok && s.GetLeaderId() != "" {
				if j := c.Index(s.GetLeaderId()); j >= 0 {
					out[s.GetShardId()] = j
				}
			}
		}
	}
	return out
}

// WaitHealthy waits until every node serves and every shard has a leader
// all its replicas agree on (the same rule as the local backend).
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for i := range Nodes {
		if err := c.WaitServing(ctx, i); err != nil {
			return err
		}
	}
	var last error
	for {
		if last = c.agree(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healthy: %w (last: %v)", ctx.Err(), last)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (c *Cluster) agree(ctx context.Context) error {
	leader := map[uint32]string{}
	known, knower := 0, ""
	for i := range Nodes {
		st, err := c.Status(ctx, i)
		if err != nil {
			return err
		}
		// The count only grows (the reshard nemesis): at least the
		// start's, and the same on every member once healthy.
		if k := len(st.GetShards()); k < c.P.Shards {
			return fmt.Errorf("%s knows %d shards of %d", service(i), k, c.P.Shards)
		} else if known == 0 {
			known, knower = k, service(i)
		} else if k != known {
			return fmt.Errorf("%s knows %d shards, %s %d", service(i), k, knower, known)
		}
		for _, s := range st.GetShards() {
			if !slices.Contains(s.GetReplicas(), service(i)) {
				continue
			}
			id := s.GetLeaderId()
			if id == "" {
				return fmt.Errorf("%s: shard %d has no leader", service(i), s.GetShardId())
			}
			if prev, ok := leader[s.GetShardId()]; ok && prev != id {
				return fmt.Errorf("shard %d: leaders %s and %s", s.GetShardId(), prev, id)
			}
			leader[s.GetShardId()] = id
		}
	}
	return nil
}
