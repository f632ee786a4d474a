package main

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	gometrics "github.com/armon/go-metrics"
)

// The handler serves what raft reports to go-metrics' global sink, with the
// timings summarised per name.
func TestRaftMetricsServesRaftTimings(t *testing.T) {
	h, err := raftMetrics()
	if err != nil {
		t.Fatal(err)
	}
	gometrics.MeasureSince([]string{"raft", "commitTime"}, time.Now().Add(-3*time.Millisecond))
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest("GET", "/debug/raft-metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Samples []struct {
			Name  string
			Count int
			Mean  float64
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	for _, s := range got.Samples {
		if s.Name == "raftq.raft.commitTime" {
			if s.Count != 1 || s.Mean < 3 {
				t.Fatalf("commitTime sample %+v, want one of at least 3 ms", s)
			}
			return
		}
	}
	t.Fatalf("no raftq.raft.commitTime in %s", rec.Body)
}
