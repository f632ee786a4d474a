package systest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/diskfault"
	"github.com/raftq/raftq/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// What a node exposes besides its API (issue #30): message bodies sit in
// its raft logs and snapshots, so its data directory is its user's alone,
// including what an operator left readable before the node started; Go's
// profiles, which show what the process holds, are served only on the
// loopback address --pprof-bind names, never on the HTTP port that
// /metrics shares; administrative calls leave an audit line each; and a
// client request is at most wire.MaxRequestBytes, refused by gRPC before
// the node reads it into memory.
func TestNodeSurface(t *testing.T) {
	root := t.TempDir()
	dirs := make([]string, 3)
	for i := range dirs {
		dirs[i] = filepath.Join(root, fmt.Sprintf("n%d", i+1))
		if err := os.Mkdir(dirs[i], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dirs[i], 0o755); err != nil { // past the test's umask
			t.Fatal(err)
		}
	}
	notes := filepath.Join(dirs[2], "operator-notes.txt")
	if err := os.WriteFile(notes, []byte("left readable by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(notes, 0o644); err != nil {
		t.Fatal(err)
	}
	pprofAddr := loopbackPort(t)
	c := startCluster(t, testcluster.Options{
		Shards:   1,
		DataDirs: dirs,
		// A snapshot within seconds: hashicorp/raft's snapshot store
		// creates its directories and files with wide modes of its own.
		Args:     []string{"--snapshot-threshold", "64", "--snapshot-interval", "1s"},
		NodeArgs: [][]string{{"--pprof-bind", pprofAddr}},
	})
	const q = "surface"
	mustCreateQueue(t, c, q, &raftqv1.QueuePolicy{})
	cl, err := client.Dial(ctxT(t, 30*time.Second), c.Addrs())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })

	t.Run("data directories private", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		for i := range 200 {
			if _, err := cl.Send(ctx, q, []byte(fmt.Sprintf("secret body %d", i))); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, n := range c.Nodes {
			for {
				snaps, err := diskfault.Snapshots(diskfault.ShardDir(n.Dir, 0))
				if err == nil && len(snaps) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no shard snapshot under %s after 200 sends: %v", n.Dir, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		for _, n := range c.Nodes {
			checked := 0
			err := filepath.WalkDir(n.Dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				checked++
				if perm := info.Mode().Perm(); perm&0o077 != 0 {
					t.Errorf("%s is %v: group or others can read what the node wrote", path, perm)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if checked < 5 {
				t.Fatalf("only %d entries under %s: not a node's data directory", checked, n.Dir)
			}
		}
	})

	t.Run("profiles only on the pprof listener", func(t *testing.T) {
		for _, n := range c.Nodes {
			if code, _ := httpGet(t, "http://"+n.HTTP+"/debug/pprof/"); code != http.StatusNotFound {
				t.Errorf("%s serves /debug/pprof/ on its HTTP port (status %d)", n.ID, code)
			}
			if code, body := httpGet(t, "http://"+n.HTTP+"/metrics"); code != http.StatusOK || !strings.Contains(body, "raftq_") {
				t.Errorf("%s /metrics: status %d", n.ID, code)
			}
		}
		if code, body := httpGet(t, "http://"+pprofAddr+"/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, "raftq-node") {
			t.Errorf("--pprof-bind %s: /debug/pprof/cmdline status %d, body %.80q", pprofAddr, code, body)
		}
	})

	t.Run("administrative calls audited", func(t *testing.T) {
		// The purge is refused (no such queue): refusals are audited too.
		_, err := queues(c, 1).PurgeQueue(ctxT(t, 10*time.Second), &raftqv1.PurgeQueueRequest{Name: "no-such-queue"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("purge of a missing queue: %v, want NotFound", err)
		}
		for _, w := range []struct {
			node int
			want []string
		}{
			{0, []string{"msg=audit", "method=Queues/CreateQueue", `name:\"surface\"`, "code=OK", "caller=anonymous@127.0.0.1:"}},
			{1, []string{"msg=audit", "method=Queues/PurgeQueue", `name:\"no-such-queue\"`, "code=NotFound"}},
		} {
			log, err := os.ReadFile(c.Nodes[w.node].LogPath)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, line := range strings.Split(string(log), "\n") {
				ok := true
				for _, part := range w.want {
					ok = ok && strings.Contains(line, part)
				}
				found = found || ok
			}
			if !found {
				t.Errorf("no audit line with %q in %s's log", w.want, c.Nodes[w.node].ID)
			}
		}
		// Sends are not administrative: no line for the 200 above.
		if log, err := os.ReadFile(c.Nodes[0].LogPath); err != nil || strings.Contains(string(log), "method=Messages/Send") {
			t.Errorf("a send was audited (read err %v)", err)
		}
	})

	t.Run("requests capped", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		before := depth(t, c, q)
		// 17 bodies of 256 KiB: over 4 MiB encoded.
		big := make([]client.Outgoing, 17)
		raw := &raftqv1.SendBatchRequest{Queue: q}
		for i := range big {
			body := bytes.Repeat([]byte{byte('a' + i)}, client.MaxBodyBytes)
			big[i] = client.Outgoing{Body: body}
			raw.Messages = append(raw.Messages, &raftqv1.SendRequest{Queue: q, Body: body})
		}
		_, err := raftqv1.NewMessagesClient(c.Conn(0)).SendBatch(ctx, raw)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
			t.Errorf("a %d-byte SendBatch on the client port: %v; want RESOURCE_EXHAUSTED, larger than max", proto.Size(raw), err)
		}
		_, err = cl.SendBatch(ctx, q, big)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != codes.InvalidArgument || !strings.Contains(err.Error(), "a request is at most 4 MiB: split it") {
			t.Errorf("client SendBatch over the cap: %v; want InvalidArgument naming the cap", err)
		}
		// 15 fit: the cap refuses only what is over it.
		if _, err := cl.SendBatch(ctx, q, big[:15]); err != nil {
			t.Fatalf("SendBatch of 15 x 256 KiB: %v", err)
		}
		if got := depth(t, c, q); got != before+15 {
			t.Fatalf("queue depth %d after the refused batches and one of 15, want %d", got, before+15)
		}
	})
}

// depth is queue q's message count as node 0 reports it.
func depth(t *testing.T, c *testcluster.Cluster, q string) uint64 {
	t.Helper()
	st, err := queues(c, 0).QueueStats(ctxT(t, 10*time.Second), &raftqv1.QueueStatsRequest{Name: q})
	if err != nil {
		t.Fatalf("stats of %s: %v", q, err)
	}
	return st.GetReady() + st.GetDelayed() + st.GetInFlight()
}

// loopbackPort returns a loopback address with a port free a moment ago.
func loopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}
