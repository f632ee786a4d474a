package peer

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/raftq/raftq/peer/peerpb"
)

// BackupPiece refuses a bad group name or a shard beyond the map before
// asking the node, and a node that does not lead refuses with its leader
// hint, which the client reads.
func TestBackupPieceRefusals(t *testing.T) {
	shards := &fakeShards{ready: true, waited: make(chan string, 1)}
	addr := serve(t, shards)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		group string
		code  codes.Code
		hint  string
	}{
		{"", codes.InvalidArgument, ""},
		{"shard-x", codes.InvalidArgument, ""},
		{"shard-2", codes.InvalidArgument, ""},
		{"shard-0", codes.Unavailable, "n2"}, // fakeNode leads nothing
		{"meta", codes.Unavailable, "n2"},
	} {
		st, err := c.BackupPiece(ctx, addr, &peerpb.BackupPieceRequest{Group: tc.group})
		if err != nil {
			t.Fatal(err)
		}
		_, hint, err := st.Recv()
		if status.Code(err) != tc.code || hint != tc.hint {
			t.Errorf("group %q: %v, hint %q; want %v, hint %q", tc.group, err, hint, tc.code, tc.hint)
		}
	}
	shards.ready = false
	st, err := c.BackupPiece(ctx, addr, &peerpb.BackupPieceRequest{Group: "shard-0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("on a node without the map: %v, want Unavailable", err)
	}
}
