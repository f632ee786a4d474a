package fsm

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/raftq/raftq/fsm/fsmpb"
)

func TestValidateQueueName(t *testing.T) {
	cases := map[string]bool{
		"orders":                               true,
		"a.b-c_D9":                             true,
		strings.Repeat("q", MaxQueueNameLen):   true,
		"":                                     false,
		strings.Repeat("q", MaxQueueNameLen+1): false,
		"has space":                            false,
		"slash/name":                           true, // tenant "slash"
		"acme/a/b":                             false,
		"Acme/jobs":                            false, // tenants are lower case
		"acme/":                                false,
		"/jobs":                                false,
		"ünicode":                              false,
	}
	// Names that exist may keep working; only new ones must start with a
	// letter, a digit or '_'.
	for _, name := range []string{".", "..", "-dash", ".hidden"} {
		if err := ValidateQueueName(name); err != nil {
			t.Errorf("ValidateQueueName(%q) = %v: an existing queue of that name would stop working", name, err)
		}
		if err := ValidateNewQueueName(name); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "start it with a letter") {
			t.Errorf("ValidateNewQueueName(%q) = %v, want a refusal saying how a name starts", name, err)
		}
	}
	if err := ValidateNewQueueName("acme/-x"); err == nil || !strings.Contains(err.Error(), "start it with a letter") {
		t.Errorf("ValidateNewQueueName(acme/-x) = %v, want a refusal saying how a name starts", err)
	}
	for _, name := range []string{"orders", "_private", "9lives", "a.b-c", "acme/jobs", "t-1/_x"} {
		if err := ValidateNewQueueName(name); err != nil {
			t.Errorf("ValidateNewQueueName(%q) = %v", name, err)
		}
	}
	// A multi-byte character is named whole, not by its first byte.
	if err := ValidateQueueName("ünïcødé"); err == nil || !strings.Contains(err.Error(), "character 'ü'") {
		t.Errorf("ValidateQueueName(ünïcødé) = %v, want it to name 'ü'", err)
	}
	for name, ok := range cases {
		err := ValidateQueueName(name)
		if (err == nil) != ok {
			t.Errorf("ValidateQueueName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("error %v does not wrap ErrInvalidArgument", err)
		}
	}
}

func TestValidatePolicy(t *testing.T) {
	cases := []struct {
		name string
		p    *fsmpb.QueuePolicy
		ok   bool
	}{
		{"nil", nil, true},
		{"zero", &fsmpb.QueuePolicy{}, true},
		{"fifo", fifoPolicy(), true},
		{"bad mode", &fsmpb.QueuePolicy{Mode: 7}, false},
		{"negative visibility", &fsmpb.QueuePolicy{VisibilityTimeoutMs: -1}, false},
		{"visibility too long", &fsmpb.QueuePolicy{VisibilityTimeoutMs: MaxVisibilityMs + 1}, false},
		{"max receive too high", &fsmpb.QueuePolicy{MaxReceiveCount: MaxReceiveCountLimit + 1}, false},
		{"backoff max below base", &fsmpb.QueuePolicy{BackoffBaseMs: 100, BackoffMaxMs: 10}, false},
		{"retention too long", &fsmpb.QueuePolicy{RetentionMs: MaxRetentionMs + 1}, false},
		{"delay too long", &fsmpb.QueuePolicy{DelayMs: MaxDelayMs + 1}, false},
		{"message bytes above cap", &fsmpb.QueuePolicy{MaxMessageBytes: MaxBodyBytes + 1}, false},
		{"negative dedup", &fsmpb.QueuePolicy{DedupWindowMs: -1}, false},
		{"negative completed retention", &fsmpb.QueuePolicy{CompletedRetentionMs: -1}, false},
	}
	for _, tc := range cases {
		err := ValidatePolicy(tc.p)
		if (err == nil) != tc.ok {
			t.Errorf("%s: ValidatePolicy = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v does not wrap ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestNormalizePolicy(t *testing.T) {
	in := &fsmpb.QueuePolicy{BackoffBaseMs: 10 * 60_000}
	n := NormalizePolicy(in)
	if in.GetMode() != fsmpb.QueueMode_QUEUE_MODE_UNSPECIFIED || in.GetVisibilityTimeoutMs() != 0 {
		t.Fatal("NormalizePolicy changed its argument")
	}
	want := &fsmpb.QueuePolicy{
		Mode: fsmpb.QueueMode_QUEUE_MODE_STANDARD, VisibilityTimeoutMs: DefaultVisibilityMs, MaxReceiveCount: DefaultMaxReceiveCount,
		BackoffBaseMs: 10 * 60_000, BackoffMaxMs: 10 * 60_000, DedupWindowMs: DefaultDedupWindowMs, RetentionMs: DefaultRetentionMs,
		MaxMessageBytes: MaxBodyBytes, CompletedRetentionMs: DefaultCompletedRetentionMs,
	}
	if n.String() != want.String() {
		t.Fatalf("normalized\n%v\nwant\n%v", n, want)
	}
	if err := ValidatePolicy(n); err != nil {
		t.Fatalf("a normalized policy is invalid: %v", err)
	}
}

func TestValidateMessageWrapsInvalidArgument(t *testing.T) {
	for _, m := range []*fsmpb.NewMessage{nil, {Priority: 10}, {Body: make([]byte, MaxBodyBytes+1)}} {
		if err := ValidateMessage(m, nil); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateMessage(%v) = %v", m, err)
		}
	}
	if err := ValidateMessage(&fsmpb.NewMessage{Body: make([]byte, MaxBodyBytes)}, nil); err != nil {
		t.Errorf("a body of exactly MaxBodyBytes: %v", err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	h := newHarness(t)
	h.mustQueue("q", &fsmpb.QueuePolicy{MaxReceiveCount: MaxHistory + 5})
	h.mustEnqueue("q", body("x"))
	var last *fsmpb.Message
	for i := 0; i < MaxHistory+3; i++ {
		last = h.mustReceive("q", 1, 1000)[0]
		h.mustOK(nackCmd(nackDelay(receipt(last), 0, strings.Repeat("é", MaxErrorLen))))
	}
	m := h.mustMessage(1)
	hist := m.GetHistory()
	if len(hist) != MaxHistory || hist[len(hist)-1].GetLeaseEpoch() != last.GetLeaseEpoch() || hist[0].GetLeaseEpoch() != 4 {
		t.Fatalf("history of %d, epochs %d..%d", len(hist), hist[0].GetLeaseEpoch(), hist[len(hist)-1].GetLeaseEpoch())
	}
	if e := m.GetLastError(); len(e) > MaxErrorLen || !utf8.ValidString(e) {
		t.Fatalf("last error of %d bytes, valid utf8 %v", len(e), utf8.ValidString(e))
	}
}
