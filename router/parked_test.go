package router

import (
	"errors"
	"testing"
)

// Long polls park up to MaxParked at once; one more is refused at once
// with a *ParkedFullError, and a freed place is taken again.
func TestParkedLongPollsAreCapped(t *testing.T) {
	r := New(&fakeTopo{}, Options{MaxParked: 2})
	t.Cleanup(func() { _ = r.Close() })
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	done := make(chan error, 2)
	for range 2 {
		go func() {
			done <- r.parked(func() error {
				started <- struct{}{}
				<-release
				return nil
			})
		}()
	}
	<-started
	<-started
	err := r.parked(func() error { t.Error("a third long poll parked past the cap of 2"); return nil })
	var full *ParkedFullError
	if !errors.As(err, &full) || full.Max != 2 {
		t.Fatalf("third long poll: %v, want a ParkedFullError naming 2", err)
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	ran := false
	if err := r.parked(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after the others ended: %v, ran %v", err, ran)
	}
}
