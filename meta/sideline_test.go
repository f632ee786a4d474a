package meta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
	"github.com/raftq/raftq/raftmux"
)

// openGatedGroup opens n meta replicas over connected in-memory transports,
// each behind its own gate, bootstraps them and waits for a leader.
func openGatedGroup(t *testing.T, n int) []*Store {
	t.Helper()
	inner := make([]*raft.InmemTransport, n)
	var servers []raft.Server
	for i := range n {
		addr, tr := raft.NewInmemTransport("")
		inner[i] = tr
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(fmt.Sprintf("m%d", i+1)), Address: addr})
	}
	for i := range n {
		for j := range n {
			if i != j {
				inner[i].Connect(inner[j].LocalAddr(), inner[j])
			}
		}
	}
	stores := make([]*Store, n)
	for i := range n {
		g := &raftmux.Gate{}
		s, err := Open(Config{
			NodeID: string(servers[i].ID), Dir: t.TempDir(), Transport: raftmux.GatedTransport(inner[i], g), Gate: g,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		stores[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stores[0].Bootstrap(ctx, servers); err != nil {
		t.Fatal(err)
	}
	return stores
}

func leaderOf(t *testing.T, stores []*Store, not *Store) *Store {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range stores {
			if s != not && s.IsLeader() {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no meta leader")
	return nil
}

// A sidelined meta leader hands leadership away, refuses writes without
// naming itself, is not made leader by a transfer aimed at it, and leads
// again once released.
func TestSidelinedMetaReplicaDoesNotLead(t *testing.T) {
	stores := openGatedGroup(t, 3)
	old := leaderOf(t, stores, nil)
	old.Sideline("clock-skew")
	next := leaderOf(t, stores, old)
	if old.IsLeader() {
		t.Fatal("sidelined replica still reports leadership")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := old.CreateQueue(ctx, "refused", nil)
	var nl *raftgroup.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID == old.nodeID {
		t.Fatalf("write on the sidelined replica: %v, want a *raftgroup.NotLeaderError not naming itself", err)
	}
	if _, err := next.CreateQueue(ctx, "kept", nil); err != nil {
		t.Fatalf("write on the new leader: %v", err)
	}

	// A transfer aimed at the sidelined replica is refused (TimeoutNow
	// held back), and it does not lead.
	target := raft.ServerID(old.nodeID)
	addr := serverAddr(t, next, target)
	if err := next.Raft().LeadershipTransferToServer(target, addr).Error(); err == nil && old.raft.State() == raft.Leader {
		t.Fatal("a transfer made the sidelined replica leader")
	}
	cur := leaderOf(t, stores, old)

	old.Unsideline("clock-skew")
	deadline := time.Now().Add(20 * time.Second)
	for old.raft.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("released replica never took leadership when it was handed over")
		}
		if cur.IsLeader() {
			_ = cur.Raft().LeadershipTransferToServer(target, addr).Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !old.IsLeader() {
		t.Fatal("released replica leads in raft but IsLeader is false")
	}
}

func serverAddr(t *testing.T, s *Store, id raft.ServerID) raft.ServerAddress {
	t.Helper()
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == id {
			return srv.Address
		}
	}
	t.Fatalf("%s not in the configuration", id)
	return ""
}
