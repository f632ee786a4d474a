package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	t0        = time.Unix(1_800_000_000, 0)
	errStale  = errors.New("stale receipt")
	errUnsent = errors.New("unavailable")
)

const vis = 5 * time.Second

func at(d time.Duration) time.Time { return t0.Add(d) }

// delivery of body as id, epoch, by a receive call of [start, start+10ms].
func delivery(body, id string, epoch uint64, start time.Duration) Delivery {
	return Delivery{Body: body, ID: id, Epoch: epoch, CallStart: at(start), CallEnd: at(start + 10*time.Millisecond)}
}

// A history that keeps the contract: one send acked and delivered once,
// one with an unknown outcome never delivered, one whose ack failed and
// which came back after its lease, then acked.
func TestCleanHistoryPasses(t *testing.T) {
	l := New(vis)
	for _, b := range []string{"a", "b", "c"} {
		l.Attempt(b)
	}
	l.Sent("a", "0-1", nil)
	l.Sent("b", "", errUnsent)
	l.Sent("c", "0-3", nil)
	l.Delivered(delivery("a", "0-1", 1, 0))
	l.Acked("0-1", 1, nil)
	l.Delivered(delivery("c", "0-3", 2, 0))
	l.Acked("0-3", 2, errStale)
	l.Delivered(delivery("c", "0-3", 3, vis+time.Second))
	l.Acked("0-3", 3, nil)
	v := l.Check()
	if err := v.Err(); err != nil {
		t.Fatalf("clean history judged bad: %v", err)
	}
	if v.AckedSends != 2 || v.UnknownSends != 1 || v.Messages != 2 || v.Redeliveries != 1 || v.AcksConfirmed != 2 || v.AcksFailed != 1 {
		t.Fatalf("counts: %s", v)
	}
	if u, s := l.Pending(); len(u) != 0 || len(s) != 0 {
		t.Fatalf("pending %v %v after every message was acked", u, s)
	}
}

// Each history breaks one rule; the verdict must name it.
func TestViolationsAreCaught(t *testing.T) {
	cases := []struct {
		name string
		want string
		run  func(l *Ledger)
	}{
		{"acked send never delivered", "acknowledged sends lost", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "0-1", nil)
		}},
		{"send stored under two ids", "sends stored twice", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "0-1", nil)
			l.Delivered(delivery("a", "0-1", 1, 0))
			l.Delivered(delivery("a", "1-7", 2, 0))
		}},
		{"unknown send delivered under two ids", "sends stored twice", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "", errUnsent)
			l.Delivered(delivery("a", "0-1", 1, 0))
			l.Delivered(delivery("a", "0-2", 2, 0))
		}},
		{"delivered again after a confirmed ack", "after a confirmed ack", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "0-1", nil)
			l.Delivered(delivery("a", "0-1", 1, 0))
			l.Acked("0-1", 1, nil)
			l.Delivered(delivery("a", "0-1", 2, 2*vis))
		}},
		{"redelivered inside the lease", "before the lease ended", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "0-1", nil)
			l.Delivered(delivery("a", "0-1", 1, 0))
			l.Acked("0-1", 1, errStale)
			l.Delivered(delivery("a", "0-1", 2, vis-time.Second))
		}},
		{"one epoch returned twice", "epochs returned twice", func(l *Ledger) {
			l.Attempt("a")
			l.Sent("a", "0-1", nil)
			l.Delivered(delivery("a", "0-1", 1, 0))
			l.Delivered(delivery("a", "0-1", 1, time.Second))
		}},
		{"delivery of a body never sent", "never sent", func(l *Ledger) {
			l.Delivered(delivery("ghost", "0-9", 1, 0))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := New(vis)
			c.run(l)
			err := l.Check().Err()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("verdict %v, want one naming %q", err, c.want)
			}
		})
	}
}

// A message whose ack failed, or was never made, is pending until it is
// delivered again and acked, or found acked on the server.
func TestPendingUntilSettled(t *testing.T) {
	l := New(vis)
	l.Attempt("a")
	l.Attempt("b")
	l.Sent("a", "0-1", nil)
	l.Sent("b", "0-2", nil)
	if u, _ := l.Pending(); len(u) != 2 {
		t.Fatalf("undelivered %v, want both sends", u)
	}
	l.Delivered(delivery("a", "0-1", 1, 0))
	l.Acked("0-1", 1, errUnsent)
	l.Delivered(delivery("b", "0-2", 2, 0))
	u, s := l.Pending()
	if len(u) != 0 || len(s) != 2 {
		t.Fatalf("pending %v %v, want both messages unsettled", u, s)
	}
	if got := l.failedAcks(10); len(got) != 1 || got[0] != "0-1" {
		t.Fatalf("failed acks %v, want 0-1 (0-2 was never acked)", got)
	}
	l.Settled("0-1")
	if _, s := l.Pending(); len(s) != 1 || s[0] != "0-2" {
		t.Fatalf("unsettled %v after the server reported 0-1 acked", s)
	}
	if want := at(10*time.Millisecond + vis); !l.LeaseEnd().Equal(want) {
		t.Fatalf("lease end %v, want %v", l.LeaseEnd(), want)
	}
}
