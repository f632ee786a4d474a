package server

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// audited reports whether a call changes what the cluster holds or how
// it is built, beyond one message: each such call leaves an audit line
// (docs/security.md, "Audit log"). Reads and the message lifecycle (send,
// receive, ack, cancel, ...) are left to metrics: a line per message would
// drown these.
func audited(method string) bool {
	switch method {
	case "/raftq.v1.Queues/CreateQueue", "/raftq.v1.Queues/UpdateQueue",
		"/raftq.v1.Queues/DeleteQueue", "/raftq.v1.Queues/PurgeQueue",
		"/raftq.v1.DeadLetters/Redrive", "/raftq.v1.DeadLetters/Discard",
		"/raftq.v1.Cluster/Repair", "/raftq.v1.Cluster/RemoveNode",
		"/raftq.v1.Cluster/ReplaceNode", "/raftq.v1.Cluster/Rebalance",
		"/raftq.v1.Cluster/CancelMove", "/raftq.v1.Cluster/SetShardCount",
		"/raftq.v1.Cluster/Backup":
		return true
	}
	return false
}

// maxAuditRequest bounds the request text in one line; administrative
// requests are small, so only a malformed one is cut.
const maxAuditRequest = 512

// Audit logs every administrative call on the client port once it ends:
// who (the caller's certificate identity, if any, and address), what (method and request), when (the line's
// time), and how it ended (gRPC code, duration). The interceptors go on
// the client server only; node-to-node calls are the cluster's own.
type Audit struct{ log *slog.Logger }

// NewAudit returns an Audit writing to log.
func NewAudit(log *slog.Logger) *Audit { return &Audit{log: log} }

// Unary is the interceptor for unary calls.
func (a *Audit) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !audited(info.FullMethod) {
			return handler(ctx, req)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		a.record(ctx, info.FullMethod, req, start, err)
		return resp, err
	}
}

// Stream is the interceptor for streaming calls (Backup): the request is
// the stream's first message.
func (a *Audit) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !audited(info.FullMethod) {
			return handler(srv, ss)
		}
		start := time.Now()
		rs := &firstRecv{ServerStream: ss}
		err := handler(srv, rs)
		a.record(ss.Context(), info.FullMethod, rs.first, start, err)
		return err
	}
}

func (a *Audit) record(ctx context.Context, method string, req any, start time.Time, err error) {
	caller := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		caller = p.Addr.String()
	}
	// The certificate's identity, when the caller showed one, before its
	// address: "client/billing@10.0.0.7:51234".
	if id, ok := principal(ctx); ok {
		caller = id.String() + "@" + caller
	}
	text := ""
	if m, ok := req.(proto.Message); ok {
		text = prototext.MarshalOptions{}.Format(m)
		text = strings.Join(strings.Fields(text), " ")
		if len(text) > maxAuditRequest {
			text = text[:maxAuditRequest] + "..."
		}
	}
	st := status.Convert(err)
	attrs := []any{"method", strings.TrimPrefix(method, "/raftq.v1."), "caller", caller, "request", text,
		"code", st.Code().String(), "took", time.Since(start).Round(time.Microsecond)}
	if err != nil {
		attrs = append(attrs, "err", st.Message())
	}
	a.log.Info("audit", attrs...)
}

// firstRecv keeps the first message a streaming handler receives.
type firstRecv struct {
	grpc.ServerStream
	first any
}

func (s *firstRecv) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.first == nil {
		s.first = m
	}
	return err
}
