package systest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/internal/testcluster"
)

func TestCluster_MetricsExposeQueuesShardsAndLatency(t *testing.T) {
	c := startCluster(t, testcluster.Options{})
	mustCreateQueue(t, c, "observed", nil)
	ctx := ctxT(t, 30*time.Second)
	for range 5 {
		if _, err := msgs(c, 0).Send(ctx, &raftqv1.SendRequest{Queue: "observed", Body: []byte("x")}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	// SendBatch counts like Send: the Go client coalesces Sends into it.
	for _, keys := range [][]string{{"a", "b"}, {"a", "c"}} {
		batch := &raftqv1.SendBatchRequest{Queue: "observed"}
		for _, k := range keys {
			batch.Messages = append(batch.Messages, &raftqv1.SendRequest{Body: []byte("y"), DedupKey: k})
		}
		resp, err := msgs(c, 0).SendBatch(ctx, batch)
		if err != nil {
			t.Fatalf("send batch %v: %v", keys, err)
		}
		for i, r := range resp.GetResults() {
			if r.GetCode() != 0 {
				t.Fatalf("send batch %v item %d: code %d %s", keys, i, r.GetCode(), r.GetError())
			}
		}
	}
	text := scrapeAll(t, c)
	for _, want := range []string{
		`raftq_shard_is_leader{shard="0"}`,
		`raftq_shard_applied_index{shard="0"}`,
		`raftq_queue_messages{queue="observed",shard=`,
		`raftq_queue_oldest_ready_age_seconds{queue="observed"`,
		`raftq_messages_total{event="sent",queue="observed"} 8`,
		`raftq_messages_total{event="deduplicated",queue="observed"} 1`,
		`raftq_shard_proposer_rounds_total{shard=`,
		`raftq_request_duration_seconds_bucket{code="OK",method="/raftq.v1.Messages/Send"`,
		`process_resident_memory_bytes`,
		`raftq_shard_propose_seconds_bucket{shard=`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Exactly one leader per shard across the cluster.
	if got := strings.Count(text, "raftq_shard_is_leader{shard=\"0\"} 1"); got != 1 {
		t.Errorf("shard 0 has %d leaders in metrics, want 1", got)
	}
	resp, err := http.Get("http://" + c.Nodes[1].HTTP + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", err, resp)
	}
	_ = resp.Body.Close()
}
