package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestLatencySummary(t *testing.T) {
	l := newLatency()
	if got := l.summary(); got != (summary{}) {
		t.Fatalf("empty summary = %+v, want zero", got)
	}
	// 1..1000 ms, once each: p50 ~ 500 ms, p99 ~ 990 ms, max 1000 ms.
	for i := 1; i <= 1000; i++ {
		l.record(time.Duration(i) * time.Millisecond)
	}
	l.recordN(5*time.Millisecond, 0) // a batch of nothing books nothing
	s := l.summary()
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.002+0.01 {
			t.Errorf("%s = %.3f ms, want %.3f", name, got, want)
		}
	}
	if s.Count != 1000 {
		t.Errorf("count = %d, want 1000", s.Count)
	}
	near("p50", s.P50, 500)
	near("p99", s.P99, 990)
	near("p999", s.P999, 999)
	near("max", s.Max, 1000)
}

func TestLatencyBatchAndClamp(t *testing.T) {
	l := newLatency()
	l.recordN(2*time.Millisecond, 99)
	l.record(time.Hour) // above the range: clamped to the top, not dropped
	s := l.summary()
	if s.Count != 100 {
		t.Fatalf("count = %d, want 100", s.Count)
	}
	if s.P50 < 1.99 || s.P50 > 2.01 {
		t.Errorf("p50 = %.3f ms, want 2", s.P50)
	}
	if s.Max < float64(9*time.Minute/time.Millisecond) {
		t.Errorf("max = %.0f ms, want the clamped top (~10 min)", s.Max)
	}
}

func TestLatencyIntervalResetsButRunKeepsAll(t *testing.T) {
	l := newLatency()
	if p, n := l.interval(); p != 0 || n != 0 {
		t.Fatalf("empty interval = %.3f ms over %d, want nothing", p, n)
	}
	l.recordN(200*time.Millisecond, 10) // a bad first second
	if p, n := l.interval(); n != 10 || p < 199 || p > 201 {
		t.Fatalf("first interval p99 = %.3f ms over %d, want 200 ms over 10", p, n)
	}
	l.recordN(3*time.Millisecond, 90)
	if p, n := l.interval(); n != 90 || p < 2.99 || p > 3.01 {
		t.Fatalf("second interval p99 = %.3f ms over %d, want 3 ms over 90: the first interval leaked in", p, n)
	}
	if s := l.summary(); s.Count != 100 || s.Max < 199 {
		t.Fatalf("run summary = %+v, want all 100 samples with the 200 ms max", s)
	}
}

func TestSteadyJSONHasHeadlineFields(t *testing.T) {
	var b bytes.Buffer
	r := &steadyResult{Workload: "steady", EnqueuePerS: 1234, Lost: 0, ClaimP99: 3.5}
	if err := printResult(&b, r, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, b.String())
	}
	for _, k := range []string{"enqueue_per_s", "processed_per_s", "enqueue_p50_ms", "enqueue_p99_ms",
		"claim_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "redelivered", "lost"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if m["enqueue_per_s"] != 1234.0 || m["claim_p99_ms"] != 3.5 {
		t.Errorf("values not carried: %v", m)
	}
	b.Reset()
	if err := printResult(&b, r, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "enqueue/s") || !strings.Contains(b.String(), "1234") {
		t.Errorf("table lacks the enqueue rate:\n%s", b.String())
	}
}
