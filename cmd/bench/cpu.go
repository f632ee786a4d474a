package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// CPU per processed message is the efficiency figure: on a machine the
// cluster and the load generator share, throughput is what the CPU allows,
// so comparing two systems means comparing what each spends per message,
// on the servers and in the client. The nodes' CPU comes from
// /proc/<pid>/stat when PIDs are given, else from their
// process_cpu_seconds_total metric; the client's from getrusage.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuMark is the CPU seconds used so far by each node and by this process.
type cpuMark struct {
	nodes []float64
	self  float64
	err   error // the first node that could not be read
}

// cpuUse is the CPU a measured window cost, in the report.
type cpuUse struct {
	ServerS         float64 `json:"server_cpu_s,omitempty"`
	ClientS         float64 `json:"client_cpu_s"`
	ServerUsPerMsg  float64 `json:"server_cpu_us_per_msg,omitempty"`
	ClientUsPerMsg  float64 `json:"client_cpu_us_per_msg"`
	ServerUnreadErr string  `json:"server_cpu_error,omitempty"`
}

func (m nodeSource) cpu(ctx context.Context) cpuMark {
	var mk cpuMark
	note := func(err error) {
		if mk.err == nil {
			mk.err = err
		}
	}
	for _, p := range m.pids {
		v, err := procCPU(p)
		note(err)
		mk.nodes = append(mk.nodes, v)
	}
	for _, url := range m.urls {
		v, err := metricValue(ctx, url, "process_cpu_seconds_total")
		if err != nil {
			note(fmt.Errorf("node CPU from %s: %w", url, err))
		}
		mk.nodes = append(mk.nodes, v)
	}
	mk.self = selfCPU()
	return mk
}

// use is the CPU spent between a and b over msgs processed messages. The
// server figures are left out when a node could not be read at either end.
func (a cpuMark) use(b cpuMark, msgs uint64) cpuUse {
	u := cpuUse{ClientS: b.self - a.self}
	if msgs > 0 {
		u.ClientUsPerMsg = u.ClientS / float64(msgs) * 1e6
	}
	switch {
	case a.err != nil:
		u.ServerUnreadErr = a.err.Error()
	case b.err != nil:
		u.ServerUnreadErr = b.err.Error()
	case len(a.nodes) == 0:
		u.ServerUnreadErr = "no --pids or --metrics given"
	default:
		for i := range a.nodes {
			u.ServerS += b.nodes[i] - a.nodes[i]
		}
		if msgs > 0 {
			u.ServerUsPerMsg = u.ServerS / float64(msgs) * 1e6
		}
	}
	return u
}

func (u cpuUse) row() string {
	client := fmt.Sprintf("client %.1f s (%.1f us/msg)", u.ClientS, u.ClientUsPerMsg)
	if u.ServerUnreadErr != "" {
		return client + "; nodes unread: " + u.ServerUnreadErr
	}
	return fmt.Sprintf("nodes %.1f s (%.1f us/msg), %s", u.ServerS, u.ServerUsPerMsg, client)
}

func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("node CPU: %w", err)
	}
	v, err := parseStatCPU(string(b))
	if err != nil {
		return 0, fmt.Errorf("node CPU of pid %d: %w", pid, err)
	}
	return v, nil
}

// parseStatCPU returns utime+stime in seconds from a /proc/<pid>/stat
// line. The command name in parentheses may hold spaces, so fields are
// counted from its closing parenthesis: utime and stime are the 14th and
// 15th fields of the line, the 12th and 13th after it.
func parseStatCPU(line string) (float64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat line without a command name")
	}
	f := strings.Fields(line[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat line with %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat field %q: %w", s, err)
		}
		ticks += v
	}
	return float64(ticks) / clockTicks, nil
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
