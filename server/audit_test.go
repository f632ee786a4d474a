package server

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
)

func auditTo(buf *bytes.Buffer) *Audit {
	return NewAudit(slog.New(slog.NewTextHandler(buf, nil)), "n1", nil, nil)
}

func callerCtx() context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 4567}})
}

func TestAuditLogsAdministrativeCallsWithCallerRequestAndOutcome(t *testing.T) {
	var buf bytes.Buffer
	a := auditTo(&buf)
	info := &grpc.UnaryServerInfo{FullMethod: "/raftq.v1.Queues/DeleteQueue"}
	refused := status.Error(codes.NotFound, `queue "jobs" not found`)
	_, err := a.Unary()(callerCtx(), &raftqv1.DeleteQueueRequest{Name: "jobs"}, info, func(context.Context, any) (any, error) {
		return nil, refused
	})
	if err != refused {
		t.Fatalf("the interceptor changed the handler's error: %v", err)
	}
	line := buf.String()
	for _, want := range []string{"msg=audit", "method=Queues/DeleteQueue", "caller=10.1.2.3:4567", `request="name:\"jobs\""`, "code=NotFound", `err="queue \"jobs\" not found"`} {
		if !strings.Contains(line, want) {
			t.Errorf("audit line %q lacks %s", line, want)
		}
	}
	if n := strings.Count(line, "\n"); n != 1 {
		t.Errorf("%d lines for one call: %q", n, line)
	}
}

func TestAuditLeavesTheMessageLifecycleToMetrics(t *testing.T) {
	var buf bytes.Buffer
	a := auditTo(&buf)
	for _, m := range []string{"/raftq.v1.Messages/Send", "/raftq.v1.Messages/Ack", "/raftq.v1.Queues/ListQueues", "/raftq.v1.Cluster/Status"} {
		called := false
		_, err := a.Unary()(callerCtx(), &raftqv1.SendRequest{Queue: "jobs"}, &grpc.UnaryServerInfo{FullMethod: m}, func(context.Context, any) (any, error) {
			called = true
			return &raftqv1.SendResponse{}, nil
		})
		if err != nil || !called {
			t.Fatalf("%s: handler called %v, err %v", m, called, err)
		}
	}
	if buf.Len() != 0 {
		t.Fatalf("audit lines for non-administrative calls: %q", buf.String())
	}
}

// backupStream is the server side of a Backup stream as the handler sees
// it: one (empty) request to receive, then a refused send.
type backupStream struct{ grpc.ServerStream }

func (s *backupStream) Context() context.Context { return callerCtx() }
func (s *backupStream) RecvMsg(any) error        { return nil }

func TestAuditLogsAStreamWithItsFirstRequest(t *testing.T) {
	var buf bytes.Buffer
	a := auditTo(&buf)
	failed := status.Error(codes.Unavailable, "meta has no leader")
	err := a.Stream()(nil, &backupStream{}, &grpc.StreamServerInfo{FullMethod: "/raftq.v1.Cluster/Backup", IsServerStream: true}, func(_ any, s grpc.ServerStream) error {
		if err := s.RecvMsg(&raftqv1.BackupRequest{}); err != nil {
			return err
		}
		return failed
	})
	if err != failed {
		t.Fatalf("the interceptor changed the handler's error: %v", err)
	}
	line := buf.String()
	for _, want := range []string{"method=Cluster/Backup", "caller=10.1.2.3:4567", `request=""`, "code=Unavailable", `err="meta has no leader"`} {
		if !strings.Contains(line, want) {
			t.Errorf("audit line %q lacks %s", line, want)
		}
	}
}
