package router

import (
	"errors"
	"testing"
)

// Long polls park up to MaxParked at once; one more is refused at once
// with a *ParkedFullError, and a freed place is taken again. (Two
// tenants, each within its share of half.)
func TestParkedLongPollsAreCapped(t *testing.T) {
	r := New(&fakeTopo{}, Options{MaxParked: 2})
	t.Cleanup(func() { _ = r.Close() })
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	done := make(chan error, 2)
	for _, q := range []string{"a/q", "b/q"} {
		go func() {
			done <- r.park(q, func() error {
				started <- struct{}{}
				<-release
				return nil
			})
		}()
	}
	<-started
	<-started
	err := r.park("c/q", func() error { t.Error("a third long poll parked past the cap of 2"); return nil })
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
	if err := r.park("q", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after the others ended: %v, ran %v", err, ran)
	}
}

// A tenant that already parks receives holds at most an equal share with
// one more tenant: its idle consumers cannot take every slot from
// another's, and the other tenant parks.
func TestParkedShareByTenant(t *testing.T) {
	var c parkedCount
	for i := range 3 {
		if err := c.add("a", 6); err != nil {
			t.Fatalf("a's long poll %d of its share 3: %v", i+1, err)
		}
	}
	err := c.add("a", 6)
	var full *ParkedFullError
	if !errors.As(err, &full) || full.Tenant != "a" || full.Share != 3 {
		t.Fatalf("a's 4th: %v, want a refusal naming tenant a and its share", err)
	}
	if err := c.add("b", 6); err != nil {
		t.Fatalf("b's first while a holds its share: %v", err)
	}
	// Two tenants parked: a's share is now 6/3 = 2, and it holds 3.
	if err := c.add("a", 6); err == nil {
		t.Fatal("a parked past its share with two tenants parked")
	}
	c.done("a")
	c.done("a")
	if err := c.add("a", 6); err != nil {
		t.Fatalf("a back under its share: %v", err)
	}
}
