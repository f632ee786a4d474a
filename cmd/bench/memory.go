package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// nodeSource reads each node's resident memory (here) and CPU (cpu.go):
// from /proc when PIDs are given (exact, same host), else from the nodes'
// process metrics.
type nodeSource struct {
	pids []int
	urls []string
}

func newNodeSource(pids, urls string) (nodeSource, error) {
	var m nodeSource
	for _, f := range strings.Split(pids, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil {
			return m, fmt.Errorf("--pids %q: %w", pids, err)
		}
		m.pids = append(m.pids, p)
	}
	if len(m.pids) == 0 {
		for _, f := range strings.Split(urls, ",") {
			if f = strings.TrimSpace(f); f != "" {
				m.urls = append(m.urls, f)
			}
		}
	}
	return m, nil
}

// read returns each node's RSS in bytes (0 where unreadable) and the first
// error.
func (m nodeSource) read(ctx context.Context) ([]uint64, error) {
	var firstErr error
	note := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	var out []uint64
	for _, p := range m.pids {
		v, err := procRSS(p)
		if err != nil {
			note(err)
		}
		out = append(out, v)
	}
	for _, url := range m.urls {
		v, err := metricRSS(ctx, url)
		if err != nil {
			note(err)
		}
		out = append(out, v)
	}
	return out, firstErr
}

func procRSS(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("node memory: %w", err)
	}
	defer f.Close()
	return parseVmRSS(f)
}

// parseVmRSS finds "VmRSS:  1234 kB" in a /proc status file.
func parseVmRSS(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS line")
}

func metricRSS(ctx context.Context, url string) (uint64, error) {
	v, err := metricValue(ctx, url, "process_resident_memory_bytes")
	if err != nil {
		return 0, fmt.Errorf("node memory from %s: %w", url, err)
	}
	return uint64(v), nil
}

// metricValue scrapes one unlabelled metric from a node.
func metricValue(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return parseMetric(resp.Body, name)
}

// parseMetric returns the value of an unlabelled metric in Prometheus text
// format.
func parseMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, fmt.Errorf("%s value %q: %w", name, rest, err)
			}
			return v, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read metrics: %w", err)
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// names labels each node of the source: "pid N" or its metrics address.
func (m nodeSource) names() []string {
	var out []string
	for _, p := range m.pids {
		out = append(out, fmt.Sprintf("pid %d", p))
	}
	for _, u := range m.urls {
		if r, err := url.Parse(u); err == nil && r.Host != "" {
			out = append(out, r.Host)
			continue
		}
		out = append(out, u)
	}
	return out
}

// rssPeaks keeps each node's highest RSS over a stretch of a run, sampled
// every few hundred milliseconds: a flood's memory can rise and fall back
// between two single readings.
type rssPeaks struct {
	stop context.CancelFunc
	done chan struct{}
	// Written by the sampling goroutine only; read after done.
	peak    []uint64
	samples int
	err     error
}

// sampleRSS samples m every `every` from now until finish.
func sampleRSS(ctx context.Context, m nodeSource, every time.Duration) *rssPeaks {
	ctx, cancel := context.WithCancel(ctx)
	r := &rssPeaks{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			v, err := m.read(ctx)
			if ctx.Err() != nil {
				return // a read cut short by the stop is no sample
			}
			r.note(v, err)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *rssPeaks) note(v []uint64, err error) {
	if err != nil && r.err == nil {
		r.err = err
	}
	r.samples++
	if len(r.peak) < len(v) {
		r.peak = append(r.peak, make([]uint64, len(v)-len(r.peak))...)
	}
	for i, x := range v {
		r.peak[i] = max(r.peak[i], x)
	}
}

// finish stops the sampling and returns each node's peak, the number of
// samples and the first read error.
func (r *rssPeaks) finish() ([]uint64, int, error) {
	r.stop()
	<-r.done
	return r.peak, r.samples, r.err
}

// memoryBudgets reads each node's memory budget (raftq_memory_budget_bytes,
// --memory-budget as the node resolved it; 0: the node has none).
func memoryBudgets(ctx context.Context, urls string) ([]uint64, error) {
	var out []uint64
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		v, err := metricValue(ctx, u, "raftq_memory_budget_bytes")
		if err != nil {
			return nil, fmt.Errorf("memory budget from %s: %w", u, err)
		}
		out = append(out, uint64(v))
	}
	return out, nil
}

// parseBytes reads a size: a number of bytes, or one with a KiB, MiB, GiB
// or TiB suffix ("2GiB", "512MiB"); "" is 0.
func parseBytes(text string) (uint64, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return 0, nil
	}
	mult := uint64(1)
	for i, suf := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if rest, ok := strings.CutSuffix(s, suf); ok {
			s, mult = strings.TrimSpace(rest), 1<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("size %q: want bytes, or a number with KiB, MiB, GiB or TiB, below 16 EiB", text)
	}
	return n * mult, nil
}
