package server

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/raftq/raftq/meta/metapb"
	"github.com/raftq/raftq/tlsconf"
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
		"/raftq.v1.Queues/PauseQueue", "/raftq.v1.Queues/ResumeQueue",
		"/raftq.v1.DeadLetters/Redrive", "/raftq.v1.DeadLetters/Discard",
		"/raftq.v1.Cluster/Repair", "/raftq.v1.Cluster/RemoveNode",
		"/raftq.v1.Cluster/ReplaceNode", "/raftq.v1.Cluster/Rebalance",
		"/raftq.v1.Cluster/CancelMove", "/raftq.v1.Cluster/SetShardCount",
		"/raftq.v1.Cluster/Backup",
		"/raftq.v1.Access/CreateKey", "/raftq.v1.Access/RotateKey", "/raftq.v1.Access/RevokeKey",
		"/raftq.v1.Tenants/CreateTenant", "/raftq.v1.Tenants/UpdateTenant", "/raftq.v1.Tenants/DeleteTenant",
		"/raftq.v1.Schedules/CreateSchedule", "/raftq.v1.Schedules/PauseSchedule", "/raftq.v1.Schedules/ResumeSchedule",
		"/raftq.v1.Schedules/DeleteSchedule", "/raftq.v1.Schedules/TriggerSchedule":
		return true
	}
	return false
}

// maxAuditRequest bounds the request text in one line; administrative
// requests are small, so only a malformed one is cut.
const maxAuditRequest = 512

// Audit records every administrative call on the client port once it
// ends: who (the caller's principal and address), what (method and
// request), when, and how it ended (gRPC code, duration), as a log line
// and, through the store function, in the meta group's audit trail
// (Access/ListAudit). The interceptors go on the client server, after the
// access interceptors (access.go); node-to-node calls are the cluster's
// own, and a call a member forwarded to the meta leader was recorded by
// the node that took it.
type Audit struct {
	log   *slog.Logger
	node  string
	store func(context.Context, *metapb.AuditRecord) error
	who   func(context.Context) string
}

// NewAudit returns an Audit writing to log; node names where the calls
// were served; store (may be nil) keeps each record in the audit trail
// (Server.StoreAudit) and who (may be nil) names the caller
// (Server.Caller). A call refused as unauthenticated gets the log line
// only: anyone who reaches the port could otherwise flood the trail.
func NewAudit(log *slog.Logger, node string, store func(context.Context, *metapb.AuditRecord) error, who func(context.Context) string) *Audit {
	return &Audit{log: log, node: node, store: store, who: who}
}

// auditStoreTimeout bounds storing one record: an administrative call
// waits for its record, but a meta group without a leader must not hold
// it for long (the log line is written either way).
const auditStoreTimeout = 5 * time.Second

// forwardedByMember: the call is a control-plane write a member forwarded
// to this node (queues.go), already audited where it was taken. Only a
// member's word is taken for it: a client setting the header is audited.
func forwardedByMember(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get(forwardedKey)) == 0 {
		return false
	}
	id, _, ok := certificateIdentity(ctx)
	return ok && id.Role == tlsconf.RoleNode
}

// Unary is the interceptor for unary calls.
func (a *Audit) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !audited(info.FullMethod) || forwardedByMember(ctx) {
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
		if !audited(info.FullMethod) || forwardedByMember(ss.Context()) {
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
	// The principal before its address: "key/billing@10.0.0.7:51234".
	if a.who != nil {
		caller = a.who(ctx) + "@" + caller
	} else if id, _, ok := certificateIdentity(ctx); ok {
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
	if a.store == nil || st.Code() == codes.Unauthenticated {
		return
	}
	rec := &metapb.AuditRecord{AtMs: time.Now().UnixMilli(), Node: a.node, Caller: caller,
		Method: strings.TrimPrefix(method, "/raftq.v1."), Request: text, Code: st.Code().String()}
	if err != nil {
		rec.Error = st.Message()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditStoreTimeout)
	defer cancel()
	if serr := a.store(sctx, rec); serr != nil {
		a.log.Warn("audit record kept in the log only: storing it in the audit trail failed", "method", rec.Method, "err", serr)
	}
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
