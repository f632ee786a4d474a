package systest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/backup"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// backupBook records what the traffic of TestBackup_RestoreIntoNewCluster
// did: when each send was acknowledged and when an ack of each message
// was first asked for.
type backupBook struct {
	mu       sync.Mutex
	sent     map[string]sentMsg // by message id
	ackAsked map[string]time.Time
}

type sentMsg struct {
	queue, group, key string
	seq               int
	at                time.Time
}

func (b *backupBook) sentOK(id string, m sentMsg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sent[id]; !ok {
		b.sent[id] = m
	}
}

func (b *backupBook) asking(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.ackAsked[id]; !ok {
		b.ackAsked[id] = time.Now()
	}
}

// owed is every message acknowledged to its producer before from and not
// asked to be acked before to: the backup taken between them must hold it.
func (b *backupBook) owed(from, to time.Time) map[string]sentMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]sentMsg{}
	for id, m := range b.sent {
		if !m.at.Before(from) {
			continue
		}
		if at, ok := b.ackAsked[id]; ok && at.Before(to) {
			continue
		}
		out[id] = m
	}
	return out
}

const (
	backupFIFO = "bk-fifo"
	backupStd  = "bk-std"
)

// TestBackup_RestoreIntoNewCluster takes a backup through a node without
// replicas of a 3-node, 2-shard cluster under load (producers on a FIFO
// queue with dedup keys and on a standard queue with a non-default policy,
// a consumer acking, and leases left open), as a shard leader is killed
// (then another through the CLI, that leader still dead), stops it,
// restores the backup into a new
// 3-node cluster with other node ids and data directories, and checks
// that every message acknowledged before the backup started and not acked
// before it ended is there, the policies are equal, a used dedup key is
// still deduplicated and each FIFO group comes out in order.
func TestBackup_RestoreIntoNewCluster(t *testing.T) {
	t.Parallel() // see the package comment
	c := startCluster(t, testcluster.Options{Shards: 2})
	cl := dialLedgerClient(t, c)
	ctx := ctxT(t, 3*time.Minute)
	// The backup is asked of a joined node that hosts no replica and has
	// routed nothing: every piece comes from another node, found through
	// the shard map and the replicas' leader hints.
	n4i := c.AddNode()
	n4 := c.Nodes[n4i]
	fifoOpts := client.QueueOptions{FIFO: true, Visibility: 2 * time.Second, DedupWindow: 10 * time.Minute}
	stdOpts := client.QueueOptions{Visibility: 2 * time.Second, MaxReceives: 7, BackoffBase: 200 * time.Millisecond,
		BackoffMax: 2 * time.Second, Retention: 48 * time.Hour, CompletedRetention: 5 * time.Minute, DedupWindow: 10 * time.Minute}
	want := map[string]client.QueueOptions{}
	for name, o := range map[string]client.QueueOptions{backupFIFO: fifoOpts, backupStd: stdOpts} {
		if _, err := cl.CreateQueue(ctx, name, o); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		q, err := cl.GetQueue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = q.Options
	}

	book := &backupBook{sent: map[string]sentMsg{}, ackAsked: map[string]time.Time{}}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	producer := func(queue string, p int) {
		defer wg.Done()
		for seq := 0; loadCtx.Err() == nil; seq++ {
			group := fmt.Sprintf("g%d-%d", p, seq%4)
			key := fmt.Sprintf("k-%s-%d-%d", queue, p, seq)
			body := []byte(group + ":" + strconv.Itoa(seq))
			opts := []client.SendOption{client.DedupKey(key)}
			if queue == backupFIFO {
				opts = append(opts, client.Group(group))
			}
			sctx, cancel := context.WithTimeout(loadCtx, 5*time.Second)
			res, err := cl.Send(sctx, queue, body, opts...)
			cancel()
			if err != nil {
				// Not acknowledged: not owed. If it was applied after
				// all, it sits before the group's later sends in the log.
				continue
			}
			book.sentOK(res.ID, sentMsg{queue: queue, group: group, key: key, seq: seq, at: time.Now()})
		}
	}
	for p := range 2 {
		wg.Add(2)
		go producer(backupFIFO, p)
		go producer(backupStd, p)
	}
	// A consumer acks on both queues, slower than the producers send, so
	// the backup owes a backlog; some leases on the standard queue are
	// left open, so the backup holds leased messages too.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; loadCtx.Err() == nil; i++ {
			q := []string{backupFIFO, backupStd}[i%2]
			time.Sleep(50 * time.Millisecond)
			ms, err := cl.Receive(loadCtx, q, client.ReceiveOptions{Max: 3, Wait: 200 * time.Millisecond})
			if err != nil {
				continue
			}
			for j, m := range ms {
				if q == backupStd && j == 0 && i%6 == 1 {
					continue // left leased
				}
				book.asking(m.ID)
				_ = cl.Ack(loadCtx, m.Receipt)
			}
		}
	}()
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	waitFor(t, ctx, "traffic", func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		return len(book.sent) >= 300 && len(book.ackAsked) >= 50
	})

	// The backup starts as shard 0's leader dies (kill -9): its piece
	// comes from the next leader, which holds everything the dead one
	// acknowledged. n4 had routed to the dead one, so it must find the new
	// one through the other replicas.
	dead := shardLeader(t, c, 0, 0)
	c.Kill(dead)
	dir := filepath.Join(t.TempDir(), "backup")
	from := time.Now()
	// Through n4's own connection: the client (and so the CLI) sends a
	// backup to whichever node its round robin names, which may not be n4.
	err := backupVia(ctx, c.Conn(n4i), dir)
	to := time.Now()
	if err != nil {
		t.Fatalf("backup through %s: %v", n4.ID, err)
	}
	t.Logf("backup through %s took %v", n4.ID, to.Sub(from).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond) // load goes on past the backup
	stopLoad()
	wg.Wait()
	owed := book.owed(from, to)
	if len(owed) < 100 {
		t.Fatalf("only %d messages owed by the backup: too little load to judge", len(owed))
	}
	if out, err := runCLI(ctx, c.Addrs(), "backup", "create", "--out", dir); err == nil || !strings.Contains(out, "not empty") {
		t.Errorf("a second backup into %s: err %v, output %q; want a refusal naming the non-empty directory", dir, err, out)
	}
	// The CLI's own backup of the cluster, its shard 0 leader still dead.
	if out, err := runCLI(ctx, c.Addrs(), "backup", "create", "--out", filepath.Join(t.TempDir(), "cli")); err != nil ||
		!strings.Contains(out, "backed up") || !strings.Contains(out, "2 shard(s)") {
		t.Errorf("raftq backup create: %v\n%s", err, out)
	}
	for i := range c.Nodes {
		if i == dead {
			continue
		}
		if err := c.Stop(i, 15*time.Second); err != nil {
			t.Logf("stop %s: %v", c.Nodes[i].ID, err)
		}
	}
	if out, err := runCLI(ctx, nil, "backup", "verify", dir); err != nil {
		t.Fatalf("backup verify: %v\n%s", err, out)
	}
	if m, err := backup.ReadManifest(dir); err != nil || m.GatheredBy != n4.ID || m.ShardCount != 2 {
		t.Fatalf("manifest %+v, %v; want 2 shards gathered by %s", m, err, n4.ID)
	}

	backupRefusals(t, ctx, dir)

	r := testcluster.Start(t, nodeBin, testcluster.Options{Shards: 2, IDPrefix: "m", Args: []string{"--restore", dir}})
	rcl := dialLedgerClient(t, r)
	for name, w := range want {
		q, err := rcl.GetQueue(ctx, name)
		if err != nil {
			t.Fatalf("restored queue %s: %v", name, err)
		}
		if q.Options != w {
			t.Errorf("restored queue %s has policy %+v, want %+v", name, q.Options, w)
		}
	}
	// A dedup key used before the backup is still inside its window.
	var dupID string
	var dup sentMsg
	for id, m := range owed {
		if m.queue == backupFIFO {
			dupID, dup = id, m
			break
		}
	}
	res, err := rcl.Send(ctx, backupFIFO, []byte("again"), client.DedupKey(dup.key), client.Group(dup.group))
	if err != nil {
		t.Fatalf("send with a used dedup key: %v", err)
	}
	if !res.Deduplicated || res.ID != dupID {
		t.Errorf("send with dedup key %s used before the backup: id %s deduplicated %v; want %s, deduplicated", dup.key, res.ID, res.Deduplicated, dupID)
	}

	// Receive everything: each owed message must come, and each FIFO
	// group in order (leases from the backup end within the visibility).
	// One queue at a time, acked in batches: a FIFO receive leases one
	// message per group, so its pace is a receive and an ack per message
	// of a group, and a long poll of the other, drained queue in between
	// would set it instead.
	seen := map[string]bool{}
	lastSeq := map[string]int{}
	missing := map[string]int{}
	for _, m := range owed {
		missing[m.queue]++
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, q := range []string{backupFIFO, backupStd} {
		for missing[q] > 0 && time.Now().Before(deadline) {
			ms, err := rcl.Receive(ctx, q, client.ReceiveOptions{Max: 100, Wait: 300 * time.Millisecond})
			if err != nil {
				t.Logf("receive %s: %v", q, err)
				continue
			}
			receipts := make([]string, 0, len(ms))
			for _, m := range ms {
				if q == backupFIFO {
					g, s, _ := strings.Cut(string(m.Body), ":")
					seq, _ := strconv.Atoi(s)
					if last, ok := lastSeq[g]; ok && seq <= last {
						t.Errorf("FIFO group %s: message %d came after %d", g, seq, last)
					}
					lastSeq[g] = seq
				}
				if _, ok := owed[m.ID]; ok && !seen[m.ID] {
					seen[m.ID] = true
					missing[q]--
				}
				receipts = append(receipts, m.Receipt)
			}
			if err := rcl.AckBatch(ctx, receipts); err != nil {
				t.Errorf("ack %d messages of %s: %v", len(receipts), q, err)
			}
		}
	}
	var lost []string
	for id, m := range owed {
		if !seen[id] {
			lost = append(lost, fmt.Sprintf("%s (%s %s #%d)", id, m.queue, m.group, m.seq))
		}
	}
	if len(lost) > 0 {
		// What holds each group back: the state of its first unseen
		// message tells one missing from the backup from one held back.
		if st, err := rcl.Stats(ctx, backupFIFO); err == nil {
			t.Logf("%s stats: ready %d delayed %d in flight %d blocked groups %d", backupFIFO, st.Ready, st.Delayed, st.InFlight, st.BlockedGroups)
		}
		first := map[string]string{}
		for id, m := range owed {
			if m.queue != backupFIFO || seen[id] {
				continue
			}
			if f, ok := first[m.group]; !ok || owed[f].seq > m.seq {
				first[m.group] = id
			}
		}
		for g, id := range first {
			if mi, err := rcl.GetMessage(ctx, id); err != nil {
				t.Logf("group %s first unseen %s: %v", g, id, err)
			} else {
				t.Logf("group %s first unseen %s: state %s receives %d lease deadline %v epoch %d changed %v",
					g, id, mi.State, mi.ReceiveCount, mi.LeaseDeadline.Format(time.RFC3339Nano), mi.LeaseEpoch, mi.StateChanged.Format(time.RFC3339Nano))
			}
		}
		r.DumpLogs()
		t.Fatalf("%d of %d messages acknowledged before the backup and not acked are missing after the restore: %v", len(lost), len(owed), lost[:min(len(lost), 10)])
	}
	t.Logf("restored cluster delivered all %d owed messages", len(owed))
}

// runCLI runs the operator CLI against the nodes at addrs (none: an
// offline command) and returns its combined output.
func runCLI(ctx context.Context, addrs []string, args ...string) (string, error) {
	if len(addrs) > 0 {
		args = append([]string{"--addr", strings.Join(addrs, ",")}, args...)
	}
	cmd := exec.CommandContext(ctx, cliBin, args...)
	cmd.Env = append(os.Environ(), "RAFTQ_ADDR=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("exit %d", ee.ExitCode())
	}
	return string(out), err
}

// backupRefusals checks what refuses a backup: a damaged copy names its
// piece, and a node refuses to restore it into another shard count.
func backupRefusals(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	bad := filepath.Join(t.TempDir(), "damaged")
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	piece := filepath.Join(bad, "shard-1.piece")
	b, err := os.ReadFile(piece)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 1
	if err := os.WriteFile(piece, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(ctx, nil, "backup", "verify", bad); err == nil || !strings.Contains(out, "piece shard-1") || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("verify of a damaged backup: %v, output %q; want a failure naming shard-1", err, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--restore", dir, "--shards", "3"}, "the backup has 2 shards and Shards is 3"},
		{[]string{"--restore", bad}, "piece shard-1"},
	} {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		args := append([]string{"--node-id", "x1", "--data-dir", t.TempDir(), "--bootstrap-expect", "3",
			"--grpc-bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0", "--raft-bind", "127.0.0.1:0",
			"--gossip-bind", "127.0.0.1:0", "--http-bind", "", "--insecure"}, c.args...)
		out, err := exec.CommandContext(cctx, nodeBin, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("raftq-node %v: %v; want a refusal mentioning %q in:\n%s", c.args, err, c.want, out)
		}
	}
}

// backupVia takes a backup into dir through the node at the end of conn,
// as raftq backup create does through whichever node its client picks.
func backupVia(ctx context.Context, conn *grpc.ClientConn, dir string) error {
	w, err := backup.Create(dir)
	if err != nil {
		return err
	}
	err = func() error {
		st, err := raftqv1.NewClusterClient(conn).Backup(ctx, &raftqv1.BackupRequest{})
		if err != nil {
			return err
		}
		for {
			ch, err := st.Recv()
			switch {
			case errors.Is(err, io.EOF):
				return w.Commit()
			case err != nil:
				return err
			case ch.GetGroup() == "":
				err = w.Begin(ch.GetShardCount(), ch.GetClusterId(), ch.GetNodeId())
			default:
				if len(ch.GetData()) > 0 {
					err = w.Write(ch.GetGroup(), ch.GetData())
				}
				if err == nil && ch.GetEnd() {
					err = w.End(ch.GetGroup(), ch.GetIndex(), ch.GetTerm(), ch.GetSize(), ch.GetSha256())
				}
			}
			if err != nil {
				return err
			}
		}
	}()
	if err != nil {
		w.Abort()
	}
	return err
}
