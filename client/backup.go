package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

// BackupSink receives a backup stream (Client.Backup); backup.Writer is
// one. Pieces come whole and in order: shard-0 .. shard-N-1, then meta.
type BackupSink interface {
	// Begin comes first: the cluster's shard count and id, and the node
	// that gathers the pieces.
	Begin(shardCount uint32, clusterID, gatheredBy string) error
	// Write appends data to group's piece.
	Write(group string, data []byte) error
	// End closes group's piece: its raft index and term, and the size and
	// sha256 the node computed.
	End(group string, index, term, size uint64, sum []byte) error
}

// errBackupBrokeOff stops invoke from retrying a backup stream that
// already delivered data: a second attempt would start the pieces again.
var errBackupBrokeOff = errors.New("backup stream broke off")

// Backup asks a node to gather a backup of the cluster from every group's
// leader and streams it into sink. It may take a while on a large
// cluster: ctx bounds it. A refusal before any data (a node not ready) is
// retried at another node; a stream that breaks off is not, and the sink
// then holds an incomplete backup to discard.
func (c *Client) Backup(ctx context.Context, sink BackupSink) error {
	var received bool
	var extra time.Duration
	if dl, ok := ctx.Deadline(); ok {
		extra = time.Until(dl)
	}
	err := c.invoke(ctx, callSpec{shard: anyShard, extra: extra}, func(ctx context.Context, cc *grpc.ClientConn, co ...grpc.CallOption) error {
		if received {
			return errBackupBrokeOff
		}
		st, err := raftqv1.NewClusterClient(cc).Backup(ctx, &raftqv1.BackupRequest{}, co...)
		if err != nil {
			return err
		}
		for {
			ch, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			received = true
			if err := deliver(sink, ch); err != nil {
				// The sink refused (a damaged or out-of-order piece): stop
				// the stream and report that, not a transport error.
				return &sinkError{err}
			}
		}
	})
	var se *sinkError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return fmt.Errorf("backup: %w", se.err)
	}
	return fmt.Errorf("backup: %w", fromStatus(err))
}

type sinkError struct{ err error }

func (e *sinkError) Error() string { return e.err.Error() }

func deliver(sink BackupSink, ch *raftqv1.BackupChunk) error {
	if ch.GetGroup() == "" {
		return sink.Begin(ch.GetShardCount(), ch.GetClusterId(), ch.GetNodeId())
	}
	if len(ch.GetData()) > 0 {
		if err := sink.Write(ch.GetGroup(), ch.GetData()); err != nil {
			return err
		}
	}
	if ch.GetEnd() {
		return sink.End(ch.GetGroup(), ch.GetIndex(), ch.GetTerm(), ch.GetSize(), ch.GetSha256())
	}
	return nil
}
