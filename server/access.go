package server

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	raftqv1 "github.com/raftq/raftq/api/raftqv1"
	"github.com/raftq/raftq/fsm"
)

// rule is what one client method needs: a permission, and where the
// queue it acts on is in its request ("" when it names none, or when the
// handler checks the queue itself once it knows it: byHandler).
type rule struct {
	need      perm
	queue     func(req any) string
	byHandler bool
}

func queueField(req any) string {
	if r, ok := req.(interface{ GetQueue() string }); ok {
		return r.GetQueue()
	}
	return ""
}

func nameField(req any) string {
	if r, ok := req.(interface{ GetName() string }); ok {
		return r.GetName()
	}
	return ""
}

// rules covers every method of the client port
// (TestAccessRulesCoverEveryMethod); a method without one is refused.
// Settling by receipt needs the consumer role on some queue: the signed
// receipt (receipts.go) proves the message was received by a principal
// allowed to consume its queue, so holding it is the capability.
var rules = map[string]rule{
	"/raftq.v1.Queues/CreateQueue": {need: permManage, queue: nameField},
	"/raftq.v1.Queues/GetQueue":    {need: permRead, queue: nameField},
	"/raftq.v1.Queues/ListQueues":  {need: permAny, byHandler: true},
	"/raftq.v1.Queues/UpdateQueue": {need: permManage, queue: nameField},
	"/raftq.v1.Queues/DeleteQueue": {need: permManage, queue: nameField},
	"/raftq.v1.Queues/PurgeQueue":  {need: permManage, queue: nameField},
	"/raftq.v1.Queues/QueueStats":  {need: permRead, queue: nameField},
	"/raftq.v1.Queues/PauseQueue":  {need: permManage, queue: nameField},
	"/raftq.v1.Queues/ResumeQueue": {need: permManage, queue: nameField},

	"/raftq.v1.Messages/Send":          {need: permSend, queue: queueField},
	"/raftq.v1.Messages/SendBatch":     {need: permSend, queue: queueField},
	"/raftq.v1.Messages/Receive":       {need: permConsume, queue: queueField},
	"/raftq.v1.Messages/Ack":           {need: permConsume},
	"/raftq.v1.Messages/Nack":          {need: permConsume},
	"/raftq.v1.Messages/Snooze":        {need: permConsume},
	"/raftq.v1.Messages/ExtendLease":   {need: permConsume},
	"/raftq.v1.Messages/DeadLetter":    {need: permConsume},
	"/raftq.v1.Messages/GetMessage":    {need: permRead, byHandler: true},
	"/raftq.v1.Messages/CancelMessage": {need: permSend, byHandler: true},
	"/raftq.v1.Messages/WaitMessage":   {need: permRead, byHandler: true},

	"/raftq.v1.DeadLetters/ListDead": {need: permRead, queue: queueField},
	"/raftq.v1.DeadLetters/Redrive":  {need: permManage, queue: queueField},
	"/raftq.v1.DeadLetters/Discard":  {need: permManage, queue: queueField},

	// Clients route by the shard map and follow leaders by status: every
	// principal reads them.
	"/raftq.v1.Cluster/Status":        {need: permAny},
	"/raftq.v1.Cluster/ShardMap":      {need: permAny},
	"/raftq.v1.Cluster/Nodes":         {need: permAny},
	"/raftq.v1.Cluster/Repair":        {need: permCluster},
	"/raftq.v1.Cluster/RemoveNode":    {need: permCluster},
	"/raftq.v1.Cluster/ReplaceNode":   {need: permCluster},
	"/raftq.v1.Cluster/Rebalance":     {need: permCluster},
	"/raftq.v1.Cluster/Backup":        {need: permCluster},
	"/raftq.v1.Cluster/CancelMove":    {need: permCluster},
	"/raftq.v1.Cluster/SetShardCount": {need: permCluster},

	"/raftq.v1.Access/WhoAmI":    {need: permAny},
	"/raftq.v1.Access/CreateKey": {need: permCluster},
	"/raftq.v1.Access/ListKeys":  {need: permCluster},
	"/raftq.v1.Access/RotateKey": {need: permCluster},
	"/raftq.v1.Access/RevokeKey": {need: permCluster},
	"/raftq.v1.Access/ListAudit": {need: permCluster},

	"/raftq.v1.Tenants/CreateTenant": {need: permCluster},
	"/raftq.v1.Tenants/GetTenant":    {need: permAny, byHandler: true},
	"/raftq.v1.Tenants/ListTenants":  {need: permCluster},
	"/raftq.v1.Tenants/UpdateTenant": {need: permCluster},
	"/raftq.v1.Tenants/DeleteTenant": {need: permCluster},

	// Schedules send to any queue they name, as the cluster: managing
	// them needs the cluster admin role.
	"/raftq.v1.Schedules/CreateSchedule":  {need: permCluster},
	"/raftq.v1.Schedules/GetSchedule":     {need: permCluster},
	"/raftq.v1.Schedules/ListSchedules":   {need: permCluster},
	"/raftq.v1.Schedules/PauseSchedule":   {need: permCluster},
	"/raftq.v1.Schedules/ResumeSchedule":  {need: permCluster},
	"/raftq.v1.Schedules/DeleteSchedule":  {need: permCluster},
	"/raftq.v1.Schedules/TriggerSchedule": {need: permCluster},

	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      {need: permAny},
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {need: permAny},
}

// openMethod: health checks answer anyone, so load balancers and probes
// need no credentials.
func openMethod(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// onBehalfKey names the principal of a control-plane call a node forwards
// to the meta leader (queues.go); honoured only from a member.
const onBehalfKey = "raftq-on-behalf-of"

func errUnauthenticated(msg string) error { return status.Error(codes.Unauthenticated, msg) }
func errPermission(msg string) error      { return status.Error(codes.PermissionDenied, msg) }

// errNoCredentials answers a call without credentials on a node that
// requires them.
var errNoCredentials = errUnauthenticated("this node requires credentials (--client-auth require): " +
	"an API key (raftq --token, RAFTQ_TOKEN or --token-file; client.WithToken; raftq keys create makes one) " +
	"or a client certificate (raftq --cert/--key; raftq certs client NAME --grant ROLE:QUEUES makes one)")

// authorize finds the call's principal and checks its rule.
func (s *Server) authorize(ctx context.Context, method string, req any, require bool) (context.Context, error) {
	if openMethod(method) {
		return ctx, nil
	}
	p, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if p == nil {
		if require {
			return nil, errNoCredentials
		}
		p = &Principal{Name: "anonymous", Unrestricted: true}
	}
	r, ok := rules[method]
	if !ok {
		return nil, errPermission("no access rule covers " + method)
	}
	queue := ""
	if r.queue != nil && req != nil {
		if p.Tenant != "" {
			qualify(req, p.Tenant)
		}
		queue = r.queue(req)
	}
	if !p.Allows(r.need, queue) {
		return nil, denied(p, method, r.need, queue)
	}
	return withPrincipal(ctx, p), nil
}

// allowed is the check a handler makes once it knows the queue a call
// acts on (a rule with byHandler); calls without a principal (no
// interceptor ran) pass.
func allowed(ctx context.Context, method string, need perm, queue string) error {
	p := principalOf(ctx)
	if p == nil || p.Allows(need, queue) {
		return nil
	}
	return denied(p, method, need, queue)
}

// Caller names who a call comes from, for the audit trail: its
// principal, found again when the access interceptor has not run yet
// (the audit runs first, to record refused administrative calls too).
func (s *Server) Caller(ctx context.Context) string {
	if p := principalOf(ctx); p != nil {
		return p.Name
	}
	p, err := s.authenticate(ctx)
	switch {
	case err != nil:
		return "unauthenticated"
	case p == nil:
		return "anonymous"
	}
	return p.Name
}

// Access returns the interceptors that authenticate and authorize every
// call on the client port; with require, a call without credentials is
// refused, else it runs unrestricted as "anonymous". They must run first,
// so nothing (not even the audit) runs for a refused caller.
func (s *Server) Access(require bool) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			ctx, err := s.authorize(ctx, info.FullMethod, req, require)
			if err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			// Streams (Backup, reflection) need no queue: checked before
			// their first message.
			ctx, err := s.authorize(ss.Context(), info.FullMethod, nil, require)
			if err != nil {
				return err
			}
			return handler(srv, &principalStream{ServerStream: ss, ctx: ctx})
		}
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *principalStream) Context() context.Context { return s.ctx }

// qualify names a tenant's queue in full: a call of a tenant's principal
// that names a queue without a tenant ("jobs") means the tenant's own
// ("acme/jobs"). A name that has a tenant is left as it is, and Allows
// refuses it unless the tenant is the principal's.
func qualify(req any, tenant string) {
	m, ok := req.(proto.Message)
	if !ok {
		return
	}
	r := m.ProtoReflect()
	for _, name := range []protoreflect.Name{"queue", "name"} {
		fd := r.Descriptor().Fields().ByName(name)
		if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			continue
		}
		if v := r.Get(fd).String(); v != "" && !strings.Contains(v, fsm.TenantSep) {
			r.Set(fd, protoreflect.ValueOfString(tenant+fsm.TenantSep+v))
		}
		break
	}
	// A subscription's topic is the tenant's too (meta/topics.go refuses
	// one across tenants).
	if q, ok := req.(interface {
		GetPolicy() *raftqv1.QueuePolicy
	}); ok {
		if p := q.GetPolicy(); p != nil && p.GetSubscriptionOf() != "" && !strings.Contains(p.GetSubscriptionOf(), fsm.TenantSep) {
			p.SubscriptionOf = tenant + fsm.TenantSep + p.GetSubscriptionOf()
		}
	}
}
