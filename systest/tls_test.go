package systest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/fsm/fsmpb"
	"github.com/raftq/raftq/internal/testcluster"
	"github.com/raftq/raftq/peer/peerpb"
	"github.com/raftq/raftq/tlsconf"
	"github.com/raftq/raftq/wire"
)

// TestTLSClusterRefusesOutsiders runs a cluster with TLS and gossip
// encryption on (issue #30) and attacks it from outside: every attempt
// must be refused and leave the queue's messages as they were.
func TestTLSClusterRefusesOutsiders(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 1, TLS: true})
	ctx := ctxT(t, 3*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs(), client.WithTLS(c.ClientCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const q = "guarded"
	if _, err := cl.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := cl.Send(ctx, q, []byte(fmt.Sprintf("m%d", i))); err != nil {
			t.Fatalf("send over TLS: %v", err)
		}
	}
	unchanged := func(what string) {
		t.Helper()
		if got := depth(t, c, q); got != 20 {
			t.Fatalf("after %s: %d messages in %s, want 20", what, got, q)
		}
	}

	t.Run("plaintext client", func(t *testing.T) {
		cc, err := grpc.NewClient(c.Nodes[0].GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		_, err = raftqv1.NewQueuesClient(cc).PurgeQueue(ctx, &raftqv1.PurgeQueueRequest{Name: q})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "takes TLS connections only") {
			t.Fatalf("plaintext purge: %v; want UNAUTHENTICATED naming TLS", err)
		}
		unchanged("a plaintext purge")
	})

	t.Run("client certificate on the peer port", func(t *testing.T) {
		// A credential a client may hold (a client certificate of this
		// very CA) is not a member's: the node-to-node service, where raw
		// FSM commands are proposed, refuses it at the handshake.
		f, err := c.PKI().IssueClient("app", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := tlsconf.ClientFiles(f.CA, f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ServerName = "127.0.0.1"
		for _, creds := range []credentials.TransportCredentials{credentials.NewTLS(cfg), c.ClientCreds()} {
			cc, err := grpc.NewClient(c.Nodes[0].Peer, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			_, err = peerpb.NewPeerClient(cc).ShardApply(ctx, &peerpb.ShardApplyRequest{ShardId: 0,
				Command: &fsmpb.Command{Cmd: &fsmpb.Command_DeleteQueue{DeleteQueue: &fsmpb.DeleteQueue{Queue: q}}}})
			_ = cc.Close()
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("ShardApply(DeleteQueue) with a client's credentials: %v; want a refused connection", err)
			}
		}
		unchanged("a DeleteQueue through the peer port")
	})

	t.Run("raw AppendEntries on the raft port", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", c.Nodes[0].Raft, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// The raftmux header of the meta group, then an AppendEntries rpc
		// type byte and a body that would not decode: once this crashed
		// every replica that applied it.
		_, _ = conn.Write([]byte{0xA7, 1, 4, 'm', 'e', 't', 'a', 0, 0x81, 0xa4})
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := conn.Read(make([]byte, 64)); err == nil || isTimeout(err) {
			t.Fatalf("raft port answered %d bytes (err %v) to plaintext; want it closed", n, err)
		}
		waitLog(t, ctx, c, 0, "raft connection rejected")
		unchanged("a raw AppendEntries")
	})

	t.Run("gossip without the key", func(t *testing.T) {
		rogue := startRogue(t, c, "rogue1", []string{"--insecure"})
		time.Sleep(5 * time.Second)
		rogue.running(t)
		if isMember(t, c, "rogue1") {
			t.Fatal("a node gossiping in the clear became a member")
		}
		rogue.stop()
	})

	t.Run("impostor claiming a member's id", func(t *testing.T) {
		// The impostor holds the gossip key (leaked) and a certificate for
		// the victim's id from a CA of its own. With the victim down it
		// takes the victim's name in gossip; raft must keep the victim's
		// real address, since the impostor cannot prove the identity. The
		// victim is not the meta leader, whose log is read.
		leader := metaLeader(t, ctx, c)
		victim := (leader + 1) % len(c.Nodes)
		id := c.Nodes[victim].ID
		evil, err := tlsconf.InitDir(filepath.Join(t.TempDir(), "evil"), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		f, err := evil.IssueNode(id, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c.Kill(victim)
		rogue := startRogue(t, c, id, []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key,
			"--gossip-key-file", c.PKI().GossipKeyFile()})
		waitFor(t, ctx, "the meta leader's refusal of the impostor's address", func() bool {
			return logLine(t, c, leader, "did not prove its node's identity", "member="+id+" ")
		})
		if logHas(t, c, leader, `msg="raft address changed" member=`+id) {
			t.Fatalf("the meta leader moved %s's raft address to the impostor", id)
		}
		rogue.running(t)
		rogue.stop()
		c.Restart(victim)
		if err := c.WaitServing(ctx, victim); err != nil {
			t.Fatal(err)
		}
		unchanged("an impostor of " + id)
	})

	t.Run("certificate rotation on SIGHUP", func(t *testing.T) {
		old := servedSerial(t, c, 2)
		oldExpiry := certExpiryMetric(t, c, 2)
		if _, err := c.PKI().IssueNode("n3", []string{"127.0.0.1", "localhost"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		c.Signal(2, syscall.SIGHUP)
		waitLog(t, ctx, c, 2, "SIGHUP: TLS certificates and gossip keys reloaded")
		if now := servedSerial(t, c, 2); now == old {
			t.Fatalf("n3 still serves certificate %s after SIGHUP", old)
		}
		// The new certificate is good for an hour, the first for a day.
		if e := certExpiryMetric(t, c, 2); e >= oldExpiry || e < time.Now().Add(50*time.Minute).Unix() {
			t.Fatalf("expiry metric %d after rotation (was %d); want about an hour from now", e, oldExpiry)
		}
		// The cluster goes on with the rotated node.
		if _, err := cl.Send(ctx, q, []byte("after rotation")); err != nil {
			t.Fatal(err)
		}
		if got := depth(t, c, q); got != 21 {
			t.Fatalf("%d messages after one more send, want 21", got)
		}
	})

	t.Run("forged receipts", func(t *testing.T) { forgedReceipts(t, ctx, c, cl, q, 21) })
}

// servedSerial is the serial of the certificate node i serves now.
func servedSerial(t *testing.T, c *testcluster.Cluster, i int) string {
	t.Helper()
	cfg, err := tlsconf.ClientFiles(c.PKI().CAFile(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.Nodes[i].GRPC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// forgedReceipts: a receipt is signed by the node that handed it out and
// checked by whichever node is given it back; nothing else settles a lease.
func forgedReceipts(t *testing.T, ctx context.Context, c *testcluster.Cluster, cl *client.Client, q string, before uint64) {
	ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 1, Wait: 5 * time.Second, Visibility: time.Minute})
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %d messages, %v", len(ms), err)
	}
	real, err := wire.ParseReceipt(ms[0].Receipt)
	if err != nil || !real.Signed {
		t.Fatalf("receipt %q: signed %v, %v", ms[0].Receipt, real.Signed, err)
	}
	info, err := cl.GetMessage(ctx, ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.LeaseEpoch != 0 {
		t.Fatalf("GetMessage shows the live lease's epoch %d", info.LeaseEpoch)
	}
	altered := real
	altered.Epoch++
	unsigned := wire.Receipt{Shard: real.Shard, ID: real.ID, Epoch: real.Epoch, Term: real.Term}
	for name, r := range map[string]wire.Receipt{"altered": altered, "unsigned": unsigned} {
		// Through another node than the one that signed: any member
		// checks, and none takes a receipt it cannot verify.
		_, extendErr := cl.Extend(ctx, r.String(), time.Hour)
		for _, err := range []error{cl.Ack(ctx, r.String()), extendErr} {
			if !errors.Is(err, client.ErrDenied) {
				t.Fatalf("%s receipt: %v, want PERMISSION_DENIED", name, err)
			}
		}
	}
	if got := depth(t, c, q); got != before {
		t.Fatalf("%d messages after forged settles, want %d", got, before)
	}
	if err := cl.Ack(ctx, ms[0].Receipt); err != nil {
		t.Fatalf("the real receipt: %v", err)
	}
	if got := depth(t, c, q); got != before-1 {
		t.Fatalf("%d messages after the real ack, want %d", got, before-1)
	}
}

// certExpiryMetric is node i's raftq_tls_cert_expiry_timestamp_seconds.
func certExpiryMetric(t *testing.T, c *testcluster.Cluster, i int) int64 {
	t.Helper()
	code, body := httpGet(t, "http://"+c.Nodes[i].HTTP+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics of %s: %d", c.Nodes[i].ID, code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "raftq_tls_cert_expiry_timestamp_seconds "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("no raftq_tls_cert_expiry_timestamp_seconds in %s's metrics", c.Nodes[i].ID)
	return 0
}

// rogue is a node process outside the cluster's control.
type rogue struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// running fails the test if the process exited: a refusal it met must
// come from the cluster, not from a rogue that never started.
func (r *rogue) running(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
		t.Fatalf("the rogue node exited: %v", r.cmd.ProcessState)
	default:
	}
}

func (r *rogue) stop() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// startRogue starts a raftq-node as id, joining c's gossip, with the given
// security flags.
func startRogue(t *testing.T, c *testcluster.Cluster, id string, security []string) *rogue {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"--node-id", id, "--data-dir", filepath.Join(dir, "data"),
		"--grpc-bind", loopbackPort(t), "--peer-bind", loopbackPort(t), "--raft-bind", loopbackPort(t),
		"--gossip-bind", loopbackPort(t), "--http-bind", "", "--bootstrap-expect", "0",
		"--join", strings.Join(gossipAddrs(c), ","), "--cluster-name", c.Name()}, security...)
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nodeBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &rogue{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.stop()
		}
	})
	return r
}

func gossipAddrs(c *testcluster.Cluster) []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Gossip
	}
	return out
}

// isMember reports whether node 0's status lists id.
func isMember(t *testing.T, c *testcluster.Cluster, id string) bool {
	t.Helper()
	st, err := raftqv1.NewClusterClient(c.Conn(0)).Status(ctxT(t, 10*time.Second), &raftqv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.GetMembers() {
		if m.GetNodeId() == id {
			return true
		}
	}
	return false
}

// metaLeader is the index of the node leading meta.
func metaLeader(t *testing.T, ctx context.Context, c *testcluster.Cluster) int {
	t.Helper()
	for {
		st, err := raftqv1.NewClusterClient(c.Conn(0)).Status(ctx, &raftqv1.StatusRequest{})
		if err == nil {
			for i, n := range c.Nodes {
				if n.ID == st.GetMetaLeaderId() {
					return i
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no meta leader: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func logHas(t *testing.T, c *testcluster.Cluster, i int, s string) bool {
	t.Helper()
	b, err := os.ReadFile(c.Nodes[i].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// logLine reports whether one line of node i's log holds every one of parts.
func logLine(t *testing.T, c *testcluster.Cluster, i int, parts ...string) bool {
	t.Helper()
	b, err := os.ReadFile(c.Nodes[i].LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// waitLog waits until node i's log holds s.
func waitLog(t *testing.T, ctx context.Context, c *testcluster.Cluster, i int, s string) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%q in %s's log", s, c.Nodes[i].ID), func() bool { return logHas(t, c, i, s) })
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
