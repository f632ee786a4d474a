package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
)

func mustParse(t *testing.T, args ...string) config {
	t.Helper()
	c, err := parseArgs(args, io.Discard)
	if err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return c
}

func TestHeadlineInvocation(t *testing.T) {
	c := mustParse(t, strings.Fields("steady --addr A --producers 16 --consumers 8 --size 1024 --duration 20s --inflight 256 --batch 256 --json")...)
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	want := config{Workload: "steady", Addrs: []string{"A"}, Producers: 16, Consumers: 8, Size: 1024,
		Duration: 20 * time.Second, Inflight: 256, Batch: 256, JSON: true, SendBatch: 1}
	if c.Workload != want.Workload || len(c.Addrs) != 1 || c.Addrs[0] != "A" || c.Producers != want.Producers ||
		c.Consumers != want.Consumers || c.Size != want.Size || c.Duration != want.Duration ||
		c.Inflight != want.Inflight || c.Batch != want.Batch || !c.JSON || c.SendBatch != 1 {
		t.Fatalf("parsed %+v", c)
	}
}

func TestFlagValidation(t *testing.T) {
	cases := []struct {
		args string
		want string // substring of the error; "" = valid
	}{
		{"steady", ""},
		{"steady --send-batch 64", ""},
		{"steady --inflight 1", ""},
		{"steady --send-batch 100", "must divide"},
		{"steady --size 65536 --inflight 256 --send-batch 64", "--send-batch 64 of --size 65536 bytes is over the 4 MiB a request may hold"},
		{"steady --size 16384 --inflight 256 --send-batch 128", ""},
		{"backlog --size 65536", "is over the 4 MiB"},
		{"steady --inflight 0", "--inflight"},
		{"steady --batch 1001", "--batch"},
		{"steady --size 10", "--size"},
		{"steady --duration 0s", "--duration"},
		{"steady --duration 2h", "--duration"},
		{"steady --rate -5", "--rate"},
		{"steady --addr ,", "--addr"},
		{"steady --settle 0s", ""},
		{"steady --settle -1s", "--settle"},
		{"steady --settle 10m", "--settle"},
		{"steady --progress-every 1s", ""},
		{"backlog --progress-every 10ms", "--progress-every"},
		{"steady --progress-every 2h", "--progress-every"},
		{"steady --dedup-window 30s", ""},
		{"steady --send-mode async", ""},
		{"steady --send-mode async --send-batch 16", "--send-batch must be 1"},
		{"steady --send-mode fast", "--send-mode"},
		{"steady --dedup-window -1s", "--dedup-window"},
		{"steady --dedup-window 400h", "--dedup-window"},
		{"mix", ""},
		{"mix --max-receives 1", "--max-receives"},
		{"mix --visibility 10ms", "--visibility"},
		{"backlog", ""},
		{"backlog --backlog 5000000", ""},
		{"backlog --backlog 5000001", "--backlog"},
		{"scheduled --due 100ms", "--due"},
		{"scheduled --scheduled 0", "--scheduled"},
		{"scheduled --churn-rate -1", "--churn-rate"},
		{"sweep", ""},
		{"sweep --concurrency 16,x", "--concurrency"},
		{"sweep --batches 0", "--batches"},
		{"overload", ""},
		{"overload --ceiling 20000 --ceiling-duration 0s", ""},
		{"overload --ceiling -1", "--ceiling -1 is negative"},
		{"overload --ceiling-duration 0s", "--ceiling-duration"},
		{"overload --ceiling-duration 11m", "--ceiling-duration"},
		{"overload --phase-duration 0s", "--phase-duration"},
		{"overload --warmup -1s", "--warmup"},
		{"overload --inflight 0", "--inflight"},
		{"overload --send-mode fast", "--send-mode"},
		{"overload --b-share 0", "--b-share"},
		{"overload --b-share 1", "--b-share"},
		{"overload --b-share 0.5", ""},
		{"overload --b-producers 0", "--b-producers"},
		{"overload --b-inflight 0", "--b-inflight"},
		{"overload --b-consumers 0", "--b-consumers"},
		{"overload --b-batch 1001", "--b-batch"},
		{"overload --a-factor 0", "--a-factor"},
		{"overload --a-factor 1001", "--a-factor"},
		{"overload --a-producers 0", "--a-producers"},
		{"overload --a-inflight 4097", "--a-inflight"},
		{"overload --a-send-batch 0", "--a-send-batch"},
		{"overload --size 131072", "--a-send-batch 60 of --size 131072 bytes is over the 4 MiB"},
		{"overload --size 65536", ""},
		{"overload --a-send-rate 5000000000", "--a-send-rate"},
		{"overload --a-send-burst 5000000000", "--a-send-burst"},
		{"overload --a-send-rate 2000 --a-send-burst 100 --a-max-messages 10000 --a-max-bytes 64MiB --a-max-inflight 500", ""},
		{"overload --a-max-bytes 64MB", "--a-max-bytes"},
		{"overload --budget 2GiB", ""},
		{"overload --budget lots", "--budget"},
		{"overload --queue Bench", "--queue \"Bench\""},
		{"overload --queue -x", "--queue"},
		{"overload --queue a.b", "--queue"},
		{"overload --queue x_1-y", ""},
		{"overload --queue " + strings.Repeat("q", 49), "--queue"},
		{"overload --batch 0", "--batch"},
	}
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			c := mustParse(t, strings.Fields(tc.args)...)
			err := c.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid flags refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestParseRefusals(t *testing.T) {
	for _, args := range [][]string{nil, {"--json"}, {"nosuch"}} {
		if _, err := parseArgs(args, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("parseArgs(%q) = %v, want errUsage", args, err)
		}
	}
	if _, err := parseArgs([]string{"steady", "--nosuch"}, io.Discard); err == nil {
		t.Error("unknown flag accepted")
	}
	if _, err := parseArgs([]string{"steady", "extra"}, io.Discard); err == nil {
		t.Error("stray argument accepted")
	}
}

func TestMixKindsDeterministicAndProportioned(t *testing.T) {
	counts := map[string]int{}
	for i := range uint64(10000) {
		k, d := mixKind(42, i)
		if k2, d2 := mixKind(42, i); k2 != k || d2 != d {
			t.Fatalf("message %d: kind not deterministic", i)
		}
		if k == kindSlow && (d < 200*time.Millisecond || d > 2*time.Second) {
			t.Fatalf("slow handler time %v outside 200ms-2s", d)
		}
		if k == kindFast && (d < time.Millisecond || d > 5*time.Millisecond) {
			t.Fatalf("fast handler time %v outside 1-5ms", d)
		}
		counts[k]++
	}
	for k, want := range map[string]int{kindFast: 7000, kindSlow: 2000, kindFlap: 500, kindPoison: 500} {
		if got := counts[k]; got < want*9/10 || got > want*11/10 {
			t.Errorf("%s: %d of 10000, want about %d", k, got, want)
		}
	}
}

func TestMemoryParsers(t *testing.T) {
	v, err := parseVmRSS(strings.NewReader("Name:\traftq-node\nVmPeak:\t 9 kB\nVmRSS:\t  2048 kB\n"))
	if err != nil || v != 2048<<10 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", v, err, 2048<<10)
	}
	if _, err := parseVmRSS(strings.NewReader("Name: x\n")); err == nil {
		t.Error("parseVmRSS without VmRSS succeeded")
	}
	m, err := parseMetric(strings.NewReader("# HELP x\nprocess_resident_memory_bytes_total 1\nprocess_resident_memory_bytes 1.5e+08\n"), "process_resident_memory_bytes")
	if err != nil || m != 1.5e8 {
		t.Fatalf("parseMetric = %v, %v; want 1.5e8", m, err)
	}
	if _, err := newNodeSource("1,x", ""); err == nil {
		t.Error("bad --pids accepted")
	}
}

// A flag value out of range exits 2 with a message naming the flag; only the
// bare usage error (usage already printed) is silent.
func TestReportNamesInvalidFlags(t *testing.T) {
	var stderr strings.Builder
	err := run(context.Background(), []string{"steady", "--consumers", "0"}, io.Discard, &stderr)
	if code := report(err, &stderr); code != 2 {
		t.Fatalf("exit %d for --consumers 0, want 2 (err %v)", code, err)
	}
	if !strings.Contains(stderr.String(), "--consumers 0 outside 1-1024") {
		t.Errorf("stderr %q does not name the bad flag", stderr.String())
	}
	stderr.Reset()
	if code := report(errUsage, &stderr); code != 2 || stderr.Len() != 0 {
		t.Errorf("bare usage error: exit %d, stderr %q; want 2 and nothing", code, stderr.String())
	}
	if code := report(nil, &stderr); code != 0 {
		t.Errorf("success: exit %d", code)
	}
	if code := report(fmt.Errorf("lost 3: %w", errFailed), &stderr); code != 1 {
		t.Errorf("failed checks: exit %d, want 1", code)
	}
}

func TestOverloadDefaultsAndQuotas(t *testing.T) {
	c := mustParse(t, "overload")
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	// The ceiling phase is the headline's shape.
	if c.Producers != 16 || c.Inflight != 256 || c.Consumers != 8 || c.Batch != 256 || c.SendBatch != 1 || c.Size != 1024 {
		t.Errorf("ceiling shape %+v", c)
	}
	if c.Ceiling != 0 || c.CeilingDuration != 15*time.Second || c.PhaseDuration != 10*time.Second || c.BShare != 0.05 || c.AFactor != 10 {
		t.Errorf("phases: ceiling %v for %v, phases %v, B %v, A %v", c.Ceiling, c.CeilingDuration, c.PhaseDuration, c.BShare, c.AFactor)
	}
	if q := c.aQuotas(); q != (client.Quotas{}) {
		t.Errorf("A's quotas by default %+v, want none", q)
	}
	c = mustParse(t, strings.Fields("overload --a-send-rate 2000 --a-send-burst 100 --a-max-messages 10000 --a-max-bytes 64MiB --a-max-inflight 500")...)
	want := client.Quotas{SendRate: 2000, SendBurst: 100, MaxMessages: 10000, MaxBytes: 64 << 20, MaxInFlight: 500}
	if q := c.aQuotas(); q != want {
		t.Errorf("A's quotas %+v, want %+v", q, want)
	}
}
