package ratelog

import (
	"testing"
	"time"
)

func TestAllowOncePerInterval(t *testing.T) {
	l := New(10 * time.Second)
	t0 := time.Unix(1000, 0)
	if ok, skipped := l.Allow(t0); !ok || skipped != 0 {
		t.Fatalf("first event: ok %v skipped %d, want logged with none skipped", ok, skipped)
	}
	for i := 1; i <= 3; i++ {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * time.Second)); ok {
			t.Fatalf("event %d within the interval was let through", i)
		}
	}
	if ok, skipped := l.Allow(t0.Add(10 * time.Second)); !ok || skipped != 3 {
		t.Fatalf("event at the interval: ok %v skipped %d, want logged standing for 3 skipped", ok, skipped)
	}
	if ok, skipped := l.Allow(t0.Add(time.Hour)); !ok || skipped != 0 {
		t.Fatalf("event after a quiet hour: ok %v skipped %d, want logged with none skipped", ok, skipped)
	}
}

func TestZeroValueLetsEverythingThrough(t *testing.T) {
	var l Limiter
	now := time.Unix(1000, 0)
	for range 3 {
		if ok, _ := l.Allow(now); !ok {
			t.Fatal("the zero Limiter held an event back")
		}
	}
}
