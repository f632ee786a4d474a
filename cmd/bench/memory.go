package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
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
