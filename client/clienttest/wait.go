package clienttest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing t after 10 s: the SDKs act in
// background goroutines (coalesced sends, lease extensions, worker loops),
// so tests wait for an effect instead of sleeping a guessed time.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
