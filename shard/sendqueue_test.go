package shard

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func sized(n int) *proposal { return &proposal{size: n} }

// The send queue refuses at once past a tenant's share of its bytes and
// past its whole bound, and once a tenant's sends have waited for the
// proposer longer than maxSendQueueWait; a taken send frees its bytes.
func TestSendQueueBounds(t *testing.T) {
	q := newSendQueue()
	now := time.Unix(1000, 0)
	push := func(queue string, n int, at time.Time) error { return q.push(sized(n), queue, 1, 1000, 3, at) }
	// Alone, a tenant may fill half the bound: an equal share with one
	// more tenant, who then finds room.
	if err := push("a/q", 300, now); err != nil {
		t.Fatal(err)
	}
	if err := push("a/q", 200, now); err != nil {
		t.Fatalf("a send filling the tenant's share exactly: %v", err)
	}
	err := push("a/q", 1, now)
	var ovl *OverloadError
	if !errors.As(err, &ovl) || !errors.Is(err, ErrOverloaded) || ovl.Shard != 3 || ovl.RetryAfter != sendQueueRetry ||
		!strings.Contains(err.Error(), `500 bytes of sends of tenant "a" already wait to be proposed, its share of 500`) {
		t.Fatalf("one byte past the share: %v", err)
	}
	// Another tenant (and the queues of no tenant) still get in.
	if err := push("b/q", 300, now); err != nil {
		t.Fatalf("another tenant behind a full one: %v", err)
	}
	if err := push("plain", 200, now); err != nil {
		t.Fatalf("a queue of no tenant: %v", err)
	}
	// Past the whole bound, even within a share.
	if err := push("b/q", 100, now); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("past the whole bound: %v", err)
	}
	if b, n := q.queued(); b != 1000 || n != 4 {
		t.Fatalf("queued %d bytes in %d sends", b, n)
	}
	// A tenant with nothing queued is never refused for bytes: its one
	// send is bounded by the request size.
	if err := push("c/q", 5000, now); err != nil {
		t.Fatalf("a large send of an idle tenant: %v", err)
	}
	// Below its share a tenant's send is taken whatever its size: a
	// share smaller than the largest request must not starve it.
	q2 := newSendQueue()
	if err := q2.push(sized(100), "d/q", 1, 1000, 3, now); err != nil {
		t.Fatal(err)
	}
	if err := q2.push(sized(900), "d/q", 1, 1000, 3, now); err != nil {
		t.Fatalf("a send larger than the share's room, below the share: %v", err)
	}
	if err := q2.push(sized(1), "d/q", 1, 1000, 3, now); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("a send once the share is passed: %v", err)
	}
	// Nothing of a tenant taken for longer than the wait bound: refused
	// whatever its size, while a tenant served meanwhile is not.
	later := now.Add(maxSendQueueWait + time.Second)
	for q.pop(later) != nil {
	}
	if err := push("a/q", 1, later); err != nil {
		t.Fatalf("after the queue drained: %v", err)
	}
	if err := push("a/q", 1, later.Add(maxSendQueueWait+time.Second)); !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), `no queued send of tenant "a" was proposed`) {
		t.Fatalf("a stalled tenant: %v", err)
	}
}

// A tenant that floods waits its turn: the proposer alternates between
// tenants by bytes served, and within a tenant between its queues.
func TestSendQueueFairness(t *testing.T) {
	q := newSendQueue()
	now := time.Unix(1000, 0)
	var order []string
	name := map[*proposal]string{}
	push := func(queue string, weight float64, n int) {
		t.Helper()
		for range n {
			p := sized(100)
			name[p] = queue
			if err := q.push(p, queue, weight, 1<<30, 0, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	push("a/hot", 1, 20)
	push("a/cold", 1, 2)
	push("b/q", 1, 3)
	for p := q.pop(now); p != nil; p = q.pop(now) {
		order = append(order, name[p])
	}
	// b's three sends go out within its first six turns, not after a's 22;
	// a's cold queue within a's first four.
	pos := func(queue string, k int) int {
		for i, o := range order {
			if o == queue {
				if k == 0 {
					return i
				}
				k--
			}
		}
		return -1
	}
	if p := pos("b/q", 2); p < 0 || p > 6 {
		t.Fatalf("b's last send taken at %d: %v", p, order)
	}
	if p := pos("a/cold", 1); p < 0 || p > 8 {
		t.Fatalf("a's cold queue's last send taken at %d: %v", p, order)
	}

	// Weights: a tenant of weight 3 is served three times the bytes of
	// one of weight 1 while both wait.
	w := newSendQueue()
	for range 40 {
		_ = w.push(sized(100), "heavy/q", 3, 1<<30, 0, now)
		_ = w.push(sized(100), "light/q", 1, 1<<30, 0, now)
	}
	for range 20 {
		w.pop(now)
	}
	if _, left := w.queued(); left != 60 {
		t.Fatalf("%d left", left)
	}
	if l := len(w.tenants["light"].queues["light/q"].sends); l < 34 || l > 36 {
		t.Fatalf("after 20 sends taken, light has %d of 40 left; weight 3:1 should leave 35", l)
	}

	// A tenant that was idle starts level with the others, not with the
	// credit of its idle time.
	i := newSendQueue()
	for range 10 {
		_ = i.push(sized(100), "a/q", 1, 1<<30, 0, now)
	}
	for range 5 {
		i.pop(now)
	}
	for range 5 {
		_ = i.push(sized(100), "late/q", 1, 1<<30, 0, now)
	}
	first := i.pop(now)
	second := i.pop(now)
	if first == nil || second == nil {
		t.Fatal("queue ran dry")
	}
	if i.tenants["a"] == nil || len(i.tenants["a"].queues["a/q"].sends) != 4 {
		t.Fatalf("a late tenant took two turns in a row: a has %v left", i.tenants["a"])
	}
}
