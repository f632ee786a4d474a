package liveness

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive timing shared by the nodes' peer connections, the Go client
// and the nodes' gRPC servers, which must allow what the clients do.
const (
	// KeepaliveTime is how long a connection with calls in flight may go
	// without reading anything before it is pinged: grpc-go's floor.
	KeepaliveTime = 10 * time.Second
	// KeepaliveTimeout bounds the ping's answer. grpc-go also sets it as
	// the socket's TCP_USER_TIMEOUT, so a connection whose sent data goes
	// unacknowledged this long is closed by the kernel, failing its calls
	// instead of leaving them to their deadlines.
	KeepaliveTimeout = 2 * time.Second
	// keepaliveMinTime is the shortest ping interval a node's server
	// accepts; below KeepaliveTime so a client's pings never count as
	// abuse (grpc-go's default is 5 minutes, which would make a server
	// close every connection that pings every 10 s).
	keepaliveMinTime = 5 * time.Second
)

// KeepaliveDialOption pings a connection that has calls in flight and
// has read nothing for KeepaliveTime, and closes it when the ping goes
// unanswered for KeepaliveTimeout. It closes a dead connection the probes
// of Peer have already stopped using, so a new one is dialled. Idle
// connections are not pinged: a node of an older version, which allows
// no pings without calls, would count them as abuse.
func KeepaliveDialOption() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout})
}

// KeepaliveServerOption lets clients ping as KeepaliveDialOption does.
func KeepaliveServerOption() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true})
}
