package raftmux

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

type gateNode struct {
	id   raft.ServerID
	r    *raft.Raft
	gate *Gate
}

// startGatedGroup runs an n-voter raft group on in-memory transports, each
// replica behind its own Gate.
func startGatedGroup(t *testing.T, n int) []*gateNode {
	t.Helper()
	inner := make([]*raft.InmemTransport, n)
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		inner[i] = tr
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("n%d", i+1)), Address: addr})
	}
	for i := range n {
		for j := range n {
			if i != j {
				inner[i].Connect(inner[j].LocalAddr(), inner[j])
			}
		}
	}
	nodes := make([]*gateNode, n)
	for i := range n {
		cfg := raft.DefaultConfig()
		cfg.LocalID = servers[i].ID
		cfg.HeartbeatTimeout = 100 * time.Millisecond
		cfg.ElectionTimeout = 100 * time.Millisecond
		cfg.LeaderLeaseTimeout = 50 * time.Millisecond
		cfg.LogLevel = "error"
		store := raft.NewInmemStore()
		snaps := raft.NewInmemSnapshotStore()
		g := &Gate{}
		tr := GatedTransport(inner[i], g)
		if err := raft.BootstrapCluster(cfg, store, store, snaps, tr, raft.Configuration{Servers: servers}); err != nil {
			t.Fatal(err)
		}
		r, err := raft.NewRaft(cfg, &raft.MockFSM{}, store, store, snaps, tr)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &gateNode{id: servers[i].ID, r: r, gate: g}
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			_ = nd.r.Shutdown().Error()
		}
	})
	return nodes
}

func waitLeader(t *testing.T, nodes []*gateNode, not map[raft.ServerID]bool, within time.Duration) *gateNode {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, nd := range nodes {
			if not[nd.id] {
				continue
			}
			if nd.r.State() == raft.Leader {
				return nd
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no leader outside %v within %v", not, within)
	return nil
}

// A replica holding HoldCampaign never leads: not when asked to by a
// leadership transfer, and not when every other replica could lead.
func TestGateHoldCampaignNeverLeads(t *testing.T) {
	nodes := startGatedGroup(t, 3)
	leader := waitLeader(t, nodes, nil, 5*time.Second)
	var held *gateNode
	for _, nd := range nodes {
		if nd != leader {
			held = nd
			break
		}
	}
	held.gate.Hold("skew", HoldCampaign)
	if !held.gate.Holding(HoldCampaign) || held.gate.Holding(HoldAll) {
		t.Fatalf("holding: campaign %v all %v", held.gate.Holding(HoldCampaign), held.gate.Holding(HoldAll))
	}
	// A transfer to the held replica must fail; leadership stays put or
	// goes elsewhere, never to it.
	if err := leader.r.LeadershipTransferToServer(held.id, raftAddr(t, leader.r, held.id)).Error(); err == nil {
		t.Fatalf("leadership transfer to a replica holding campaigns succeeded")
	}
	for i := 0; i < 3; i++ {
		cur := waitLeader(t, nodes, nil, 5*time.Second)
		if cur == held {
			t.Fatalf("held replica %s became leader", held.id)
		}
		// Depose the current leader by holding all its traffic: the group
		// must elect someone, and it must not be the held replica.
		cur.gate.Hold("stall", HoldAll)
		next := waitLeader(t, nodes, map[raft.ServerID]bool{cur.id: true}, 5*time.Second)
		if next == held {
			t.Fatalf("held replica %s became leader after %s was cut off", held.id, cur.id)
		}
		cur.gate.Release("stall")
		time.Sleep(300 * time.Millisecond)
	}
	held.gate.Release("skew")
	if len(held.gate.Reasons()) != 0 {
		t.Fatalf("reasons after release: %v", held.gate.Reasons())
	}
	// Released, it can lead again.
	cur := waitLeader(t, nodes, nil, 5*time.Second)
	if cur != held {
		if err := cur.r.LeadershipTransferToServer(held.id, raftAddr(t, cur.r, held.id)).Error(); err != nil {
			t.Fatalf("transfer to released replica: %v", err)
		}
	}
	if got := waitLeader(t, nodes, nil, 5*time.Second); got != held {
		t.Fatalf("after release and transfer the leader is %s, want %s", got.id, held.id)
	}
}

// A leader holding HoldAll is replaced although its raft loop never notices.
func TestGateHoldAllDeposesLeader(t *testing.T) {
	nodes := startGatedGroup(t, 3)
	leader := waitLeader(t, nodes, nil, 5*time.Second)
	leader.gate.Hold("stall", HoldAll)
	start := time.Now()
	next := waitLeader(t, nodes, map[raft.ServerID]bool{leader.id: true}, 5*time.Second)
	t.Logf("new leader %s after %v", next.id, time.Since(start))
	// The new leader commits without the held replica.
	if err := next.r.Apply([]byte("x"), 2*time.Second).Error(); err != nil {
		t.Fatalf("apply on new leader: %v", err)
	}
	leader.gate.Release("stall")
}

func raftAddr(t *testing.T, r *raft.Raft, id raft.ServerID) raft.ServerAddress {
	t.Helper()
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s.Address
		}
	}
	t.Fatalf("no server %s", id)
	return ""
}

// Ungated reaches past the gate (for the one RPC a held replica still
// sends) and leaves other transports alone.
func TestUngated(t *testing.T) {
	_, inner := raft.NewInmemTransport("")
	g := &Gate{}
	g.Hold("test", HoldAll)
	gated := GatedTransport(inner, g)
	defer func() { _ = gated.(raft.WithClose).Close() }()
	if Ungated(gated) != raft.Transport(inner) {
		t.Fatal("Ungated did not return the wrapped transport")
	}
	if Ungated(inner) != raft.Transport(inner) {
		t.Fatal("Ungated changed a transport without a gate")
	}
	if err := gated.TimeoutNow("x", "x", &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{}); !errors.Is(err, ErrGated) {
		t.Fatalf("TimeoutNow through the held gate: %v, want ErrGated", err)
	}
}
