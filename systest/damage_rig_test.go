package systest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/diskfault"
	"github.com/raftq/raftq/internal/testcluster"
)

// damageQueue is the queue every damage test sends to.
const damageQueue = "dq"

// rig is a 3-node, 1-shard cluster whose acknowledged sends are recorded,
// so a test can check, after damaging and repairing a replica, that every
// one of them is still there.
type rig struct {
	t  *testing.T
	c  *testcluster.Cluster
	cl *client.Client

	mu    sync.Mutex
	acked map[string]string // message id -> body
	run   string            // random tag: bodies are unique across runs

	probes int
}

func newRig(t *testing.T, args ...string) *rig {
	t.Helper()
	c := startCluster(t, testcluster.Options{Shards: 1, Args: args})
	mustCreateQueue(t, c, damageQueue, &raftqv1.QueuePolicy{VisibilityTimeoutMs: 30_000})
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs(), client.WithCallTimeout(3*time.Second))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &rig{t: t, c: c, cl: cl, acked: map[string]string{}, run: hex.EncodeToString(b[:])}
}

// body is the unique body of message i of tag: long enough that finding
// it in a log segment finds nothing else.
func (r *rig) body(tag string, i int) string {
	return fmt.Sprintf("body-%s-%s-%05d-end", r.run, tag, i)
}

// send sends n messages tagged tag with 4 senders, each until it is
// acknowledged (the dedup key makes a retry of an outcome-unknown send
// return the first id), and records them. It returns the bodies in order.
func (r *rig) send(tag string, n int) []string {
	r.t.Helper()
	ctx := ctxT(r.t, 60*time.Second)
	bodies := make([]string, n)
	work := make(chan int)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				bodies[i] = r.body(tag, i)
				if err := r.sendOne(ctx, bodies[i], fmt.Sprintf("%s-%s-%d", r.run, tag, i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			r.t.Fatalf("send %s: %v", tag, err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		r.t.Fatalf("send %s: %v", tag, err)
	default:
	}
	return bodies
}

func (r *rig) sendOne(ctx context.Context, body, key string) error {
	for {
		res, err := r.cl.Send(ctx, damageQueue, []byte(body), client.DedupKey(key))
		if err == nil {
			r.mu.Lock()
			r.acked[res.ID] = body
			r.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s never acknowledged: %w", body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shardLeader is the node leading shard 0, as the first running node
// that knows one says (a node whose replica is damaged knows none).
func (r *rig) shardLeader() int {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for i := range r.c.Nodes {
			if !r.c.Running(i) {
				continue
			}
			st, err := r.status(i)
			if err != nil {
				continue
			}
			for _, s := range st.GetShards() {
				if s.GetShardId() == 0 && s.GetLeaderId() != "" {
					if l := r.index(s.GetLeaderId()); l >= 0 && r.c.Running(l) {
						return l
					}
				}
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatal("no node names a leader of shard 0")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// status asks node i for its view of the cluster.
func (r *rig) status(i int) (*raftqv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return raftqv1.NewClusterClient(r.c.Conn(i)).Status(ctx, &raftqv1.StatusRequest{})
}

// roles returns the shard leader and the two followers of shard 0.
func (r *rig) roles() (leader, f1, f2 int) {
	r.t.Helper()
	leader = r.shardLeader()
	var fs []int
	for i := range r.c.Nodes {
		if i != leader {
			fs = append(fs, i)
		}
	}
	return leader, fs[0], fs[1]
}

// stop stops node i with SIGTERM (graceful) or kill -9.
func (r *rig) stop(i int, hard bool) {
	r.t.Helper()
	if hard {
		r.c.Kill(i)
		return
	}
	if err := r.c.Stop(i, 30*time.Second); err != nil {
		r.t.Fatalf("stop %s: %v", r.c.Nodes[i].ID, err)
	}
}

func (r *rig) waitServing(i int) {
	r.t.Helper()
	if err := r.c.WaitServing(ctxT(r.t, 60*time.Second), i); err != nil {
		r.t.Fatalf("%s not serving: %v", r.c.Nodes[i].ID, err)
	}
}

// verifyAll checks that the three replicas hold the same state at the
// same applied index, then drains the queue and checks that every
// acknowledged message is delivered, each once.
func (r *rig) verifyAll() {
	r.t.Helper()
	waitSameDigests(r.t, r.c, 1)
	got := drainIDs(r.t, r.c, r.shardLeader(), damageQueue)
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := 0
	for id, body := range r.acked {
		switch b, ok := got[id]; {
		case !ok:
			missing++
			if missing <= 5 {
				r.t.Errorf("acknowledged message %s (%s) lost", id, body)
			}
		case b != body:
			r.t.Errorf("message %s delivered with body %q, sent %q", id, b, body)
		}
	}
	if missing > 0 {
		r.t.Fatalf("%d of %d acknowledged messages lost", missing, len(r.acked))
	}
	r.t.Logf("all %d acknowledged messages delivered; replicas identical", len(r.acked))
}

// drainIDs receives and acks everything from queue through node i until
// three empty long polls in a row, returning id -> body.
func drainIDs(t *testing.T, c *testcluster.Cluster, i int, queue string) map[string]string {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	out := map[string]string{}
	for empty := 0; empty < 3; {
		resp, err := msgs(c, i).Receive(ctx, &raftqv1.ReceiveRequest{Queue: queue, MaxMessages: 100, WaitMs: 300})
		if err != nil {
			if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			t.Fatalf("drain receive: %v", err)
		}
		if len(resp.GetMessages()) == 0 {
			empty++
			continue
		}
		empty = 0
		var receipts []string
		for _, m := range resp.GetMessages() {
			if prev, dup := out[m.GetMessageId()]; dup {
				t.Fatalf("message %s (%s) delivered twice although its delivery was acked", m.GetMessageId(), prev)
			}
			out[m.GetMessageId()] = string(m.GetBody())
			receipts = append(receipts, m.GetReceipt())
		}
		ack, err := msgs(c, i).Ack(ctx, &raftqv1.AckRequest{Receipts: receipts})
		if err != nil {
			t.Fatalf("drain ack: %v", err)
		}
		for k, res := range ack.GetResults() {
			if res.GetCode() != 0 {
				t.Fatalf("drain ack %d: code %d %s", k, res.GetCode(), res.GetError())
			}
		}
	}
	return out
}

// segmentsOf lists node i's shard 0 log segments.
func (r *rig) segmentsOf(i int) []string {
	r.t.Helper()
	segs, err := diskfault.Segments(diskfault.ShardDir(r.c.Nodes[i].Dir, 0))
	if err != nil || len(segs) == 0 {
		r.t.Fatalf("segments of %s: %v (%d)", r.c.Nodes[i].ID, err, len(segs))
	}
	return segs
}

// findBody locates body in node i's shard 0 log segments.
func (r *rig) findBody(i int, body string) (string, int64) {
	r.t.Helper()
	path, off, err := diskfault.FindIn(r.segmentsOf(i), []byte(body))
	if err != nil {
		r.t.Fatalf("%s: %v", r.c.Nodes[i].ID, err)
	}
	if n, _ := diskfault.Find(path, []byte(body)); len(n) > 1 {
		r.t.Logf("%q is in %s %d times (a retried send); damaging the first", body, path, len(n))
	}
	return path, off
}
