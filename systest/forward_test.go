package systest

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/router"
)

// The node-to-node service is served on each node's peer port and not on
// its client port, and forwarding goes over the peer port: a call sent to
// a node that does not lead the shard still succeeds.
func TestCluster_PeerServiceIsOnlyOnThePeerPort(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	ctx := ctxT(t, time.Minute)
	for i, n := range c.Nodes {
		req := &peerpb.ShardDigestRequest{ShardId: 0}
		if _, err := peerpb.NewPeerClient(c.Conn(i)).ShardDigest(ctx, req); status.Code(err) != codes.Unimplemented {
			t.Errorf("Peer.ShardDigest on %s's client port %s = %v, want UNIMPLEMENTED", n.ID, n.GRPC, err)
		}
		if _, err := peerpb.NewPeerClient(c.PeerConn(i)).ShardDigest(ctx, req); err != nil {
			t.Errorf("Peer.ShardDigest on %s's peer port %s: %v", n.ID, n.Peer, err)
		}
	}
	mustCreateQueue(t, c, "peer", nil)
	for attempt := 0; ; attempt++ {
		leader := shardLeader(t, c, 0, 0)
		via := (leader + 1) % len(c.Nodes)
		var tr metadata.MD
		if _, err := msgs(c, via).Send(ctx, &raftqv1.SendRequest{Queue: "peer", Body: []byte("x")}, grpc.Trailer(&tr)); err != nil {
			t.Fatalf("send via %s: %v", c.Nodes[via].ID, err)
		}
		if got := tr.Get(router.ShardLeaderTrailer); len(got) > 0 {
			return // forwarded to the leader, over its peer port
		}
		// The node led the shard by the time the send arrived: try again.
		if attempt >= 5 {
			t.Fatalf("no send of %d was forwarded", attempt+1)
		}
	}
}

// A node serves a call for a shard it does not lead by forwarding it, and
// says where it went: the trailer names the shard's leader, so a client
// that cached an old leader moves to the new one instead of sending every
// call through the old one for as long as it lives.
func TestCluster_ForwardedCallNamesTheShardLeader(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	mustCreateQueue(t, c, "fwd", nil)
	ctx := ctxT(t, time.Minute)
	for attempt := 0; ; attempt++ {
		leader := shardLeader(t, c, 0, 0)
		via := (leader + 1) % len(c.Nodes)
		var send, recv metadata.MD
		if _, err := msgs(c, via).Send(ctx, &raftqv1.SendRequest{Queue: "fwd", Body: []byte("x")}, grpc.Trailer(&send)); err != nil {
			t.Fatalf("send via %s: %v", c.Nodes[via].ID, err)
		}
		if _, err := msgs(c, via).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "fwd", MaxMessages: 1, WaitMs: 1000}, grpc.Trailer(&recv)); err != nil {
			t.Fatalf("receive via %s: %v", c.Nodes[via].ID, err)
		}
		now := shardLeader(t, c, 0, 0)
		if now != leader {
			// Leadership moved under the calls (a fresh cluster hands
			// shards to their preferred replicas): ask again.
			if attempt >= 5 {
				t.Fatalf("shard 0 changed leader on each of %d attempts", attempt+1)
			}
			continue
		}
		want := fmt.Sprintf("0:%s=%s", c.Nodes[leader].ID, c.Nodes[leader].GRPC)
		for name, md := range map[string]metadata.MD{"send": send, "receive": recv} {
			got := md.Get(router.ShardLeaderTrailer)
			if len(got) == 0 || got[0] != want {
				t.Errorf("%s via follower %s: trailer %s = %q, want %q first", name, c.Nodes[via].ID, router.ShardLeaderTrailer, got, want)
			}
		}
		return
	}
}

// A long poll at a node that does not lead the shard parks at the leader
// (Peer.ShardWait) and wakes for a message sent meanwhile: it returns the
// message, not an empty answer at the end of its wait.
func TestCluster_ForwardedLongPollWakesOnSend(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1})
	mustCreateQueue(t, c, "poll", nil)
	ctx := ctxT(t, time.Minute)
	leader := shardLeader(t, c, 0, 0)
	via := (leader + 1) % len(c.Nodes)
	type got struct {
		resp *raftqv1.ReceiveResponse
		err  error
	}
	done := make(chan got, 1)
	go func() {
		resp, err := msgs(c, via).Receive(ctx, &raftqv1.ReceiveRequest{Queue: "poll", MaxMessages: 1, WaitMs: 20_000})
		done <- got{resp, err}
	}()
	time.Sleep(time.Second) // parked at the leader
	sent, err := msgs(c, leader).Send(ctx, &raftqv1.SendRequest{Queue: "poll", Body: []byte("wake")})
	if err != nil {
		t.Fatalf("send via %s: %v", c.Nodes[leader].ID, err)
	}
	g := <-done
	if g.err != nil {
		t.Fatalf("long poll via %s: %v", c.Nodes[via].ID, g.err)
	}
	if ms := g.resp.GetMessages(); len(ms) != 1 || ms[0].GetMessageId() != sent.GetMessageId() {
		t.Fatalf("long poll via %s returned %v, want message %s (waited %d us)", c.Nodes[via].ID, ms, sent.GetMessageId(), g.resp.GetWaitedUs())
	}
}
