package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// memReading is every node's memory at one moment, in node order.
type memReading struct {
	// Heap is go_memstats_heap_alloc_bytes from each node's metrics: the
	// live heap when a GC was forced just before, else live heap plus
	// garbage not yet collected.
	Heap []uint64 `json:"heap_bytes"`
	RSS  []uint64 `json:"rss_bytes"`
}

// memProbe reads node memory for the topic workload's --hold run.
type memProbe struct {
	rss     nodeSource
	metrics []string // each node's /metrics URL
	// pprof, when set, is each node's pprof base URL: a heap profile with
	// gc=1 runs a GC on the node before the reading.
	pprof []string
}

// heapMetric is the Go runtime's allocated heap: after a forced GC, what
// the node holds live (heap_inuse would add the free space of the spans
// the heap keeps).
const heapMetric = "go_memstats_heap_alloc_bytes"

// read forces a GC on every node when it can, then reads each node's heap
// and RSS; a node it cannot read reads 0, and the first error is returned.
func (m memProbe) read(ctx context.Context) (memReading, error) {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, u := range m.pprof {
		note(forceGC(ctx, u))
	}
	var r memReading
	for _, u := range m.metrics {
		v, err := metricValue(ctx, u, heapMetric)
		if err != nil {
			note(fmt.Errorf("node heap from %s: %w", u, err))
		}
		r.Heap = append(r.Heap, uint64(v))
	}
	rss, err := m.rss.read(ctx)
	note(err)
	r.RSS = rss
	return r, first
}

// forceGC has a node run a garbage collection: net/http/pprof's heap
// profile with gc=1 does one before it writes the profile (discarded).
func forceGC(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // a GC of a few GB on a busy machine
	defer cancel()
	url := strings.TrimSuffix(base, "/") + "/debug/pprof/heap?gc=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("force GC: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("force GC on %s: %w", base, err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("force GC on %s: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force GC on %s: %s", base, resp.Status)
	}
	return nil
}
