package meta

import (
	"context"
	"testing"
	"time"
)

func TestStore_CurrentOnlyWhenTrustworthy(t *testing.T) {
	ctx := context.Background()
	// A replica that never heard from a leader (fresh, or restarted and cut
	// off) must not be trusted: its queue list may be empty.
	lonely := mustOpenSingle(t, t.TempDir(), false)
	if lonely.Current(ctx, time.Second) {
		t.Fatal("a replica with no leader contact reported current")
	}
	leader := mustOpenSingle(t, t.TempDir(), true)
	waitLeader(t, leader)
	deadline := time.Now().Add(5 * time.Second)
	for !leader.Current(ctx, time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("the verified meta leader never reported current")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
