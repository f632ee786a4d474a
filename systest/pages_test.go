package systest

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/testcluster"
)

// TestListingsPage (issue #32): dead letters of a queue spread over two
// shards page through in one order (death time, shard, id) with no
// message twice or missed, pages stop below 3 MiB however many messages
// were asked for, and ListQueues pages by name; bad tokens and sizes are
// refused.
func TestListingsPage(t *testing.T) {
	c := startCluster(t, testcluster.Options{Shards: 2})
	ctx := ctxT(t, 3*time.Minute)
	cl, err := client.Dial(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const q, n = "paged", 30
	if _, err := cl.CreateQueue(ctx, q, client.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 200<<10)
	shards := map[uint32]bool{}
	for i := range n {
		r, err := cl.Send(ctx, q, body, client.Group(fmt.Sprintf("g%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		var sh uint32
		if _, err := fmt.Sscanf(r.ID, "%d-", &sh); err == nil {
			shards[sh] = true
		}
	}
	for dead := 0; dead < n; {
		ms, err := cl.Receive(ctx, q, client.ReceiveOptions{Max: 10, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if err := cl.DeadLetter(ctx, m.Receipt, "paging test"); err != nil {
				t.Fatal(err)
			}
			dead++
		}
	}

	page := func(limit int) (pages [][]*client.MessageInfo) {
		t.Helper()
		token := ""
		for {
			ms, next, err := cl.ListDeadPage(ctx, q, limit, token)
			if err != nil {
				t.Fatalf("page %d: %v", len(pages)+1, err)
			}
			pages = append(pages, ms)
			if next == "" {
				return pages
			}
			if len(pages) > n {
				t.Fatal("paging does not end")
			}
			token = next
		}
	}
	check := func(what string, pages [][]*client.MessageInfo) {
		t.Helper()
		seen := map[string]bool{}
		var last int64
		for _, p := range pages {
			for _, m := range p {
				if seen[m.ID] {
					t.Fatalf("%s: %s listed twice", what, m.ID)
				}
				seen[m.ID] = true
				if ms := m.StateChanged.UnixMilli(); ms < last {
					t.Fatalf("%s: %s died before the message listed ahead of it", what, m.ID)
				} else {
					last = ms
				}
			}
		}
		if len(seen) != n {
			t.Fatalf("%s: %d dead messages listed over %d pages, want %d", what, len(seen), len(pages), n)
		}
	}
	small := page(7)
	check("pages of 7", small)
	if len(small) < 5 {
		t.Fatalf("%d pages of at most 7 for %d messages", len(small), n)
	}
	big := page(1000)
	check("pages of up to 1000", big)
	for i, p := range big {
		size := 0
		for _, m := range p {
			size += len(m.Body) + 512
		}
		if size > 3<<20+512*len(p) {
			t.Fatalf("page %d holds about %d bytes, over 3 MiB", i+1, size)
		}
	}
	if len(big) < 2 {
		t.Fatalf("%d MiB of dead letters came in one page", n*len(body)>>20)
	}
	t.Logf("%d dead messages on shards %v: %d pages of 7, %d byte-bound pages of up to 1000", n, shards, len(small), len(big))

	for i := range 4 {
		if _, err := cl.CreateQueue(ctx, fmt.Sprintf("list-%d", i), client.QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	qc := queues(c, 0)
	var names []string
	token := ""
	for range 10 {
		resp, err := qc.ListQueues(ctx, &raftqv1.ListQueuesRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetQueues()) > 2 {
			t.Fatalf("page of %d queues, asked for 2", len(resp.GetQueues()))
		}
		for _, qi := range resp.GetQueues() {
			names = append(names, qi.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(names) != "[list-0 list-1 list-2 list-3 paged]" {
		t.Fatalf("queues paged by 2: %v", names)
	}
	all, err := cl.ListQueues(ctx)
	if err != nil || len(all) != 5 {
		t.Fatalf("client ListQueues over pages: %v %v", all, err)
	}
	for _, bad := range []proto.Message{
		&raftqv1.ListQueuesRequest{PageSize: 1001},
		&raftqv1.ListQueuesRequest{PageToken: "not-a-token"},
		&raftqv1.ListDeadRequest{Queue: q, PageToken: "bm90LWEtdG9rZW4"},
	} {
		var err error
		switch r := bad.(type) {
		case *raftqv1.ListQueuesRequest:
			_, err = qc.ListQueues(ctx, r)
		case *raftqv1.ListDeadRequest:
			_, err = raftqv1.NewDeadLettersClient(c.Conn(0)).ListDead(ctx, r)
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", bad, err)
		}
	}
}
