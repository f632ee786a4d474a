package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/raftq/raftq/raftmux"
	"github.com/raftq/raftq/shard"
)

type fakeNode struct{ raft raftmux.ConnStats }

func (fakeNode) LocalShards() []*shard.Shard    { return nil }
func (f fakeNode) RaftConns() raftmux.ConnStats { return f.raft }

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConnectionMetrics(t *testing.T) {
	m := New(fakeNode{raft: raftmux.ConnStats{Open: 7, Max: 4096, Refused: 2, IdleClosed: 3}})
	m.ClientConns(1)
	m.ClientConns(1)
	m.ClientConns(-1)
	m.ClientConnRefused("ceiling")
	out := scrape(t, m)
	for _, want := range []string{
		"raftq_raft_connections 7\n",
		"raftq_raft_connections_limit 4096\n",
		"raftq_raft_connections_refused_total 2\n",
		"raftq_raft_connections_idle_closed_total 3\n",
		"raftq_client_connections 1\n",
		`raftq_client_connections_refused_total{at="ceiling"} 1` + "\n",
		`raftq_client_connections_refused_total{at="limit"} 0` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
