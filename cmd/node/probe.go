package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/raftq/raftq/tlsconf"
)

// Exit codes of `raftq-node probe`. Docker reads 0 as healthy and 1 as
// unhealthy and reserves 2, so every failure, usage errors included, is 1.
const (
	probeHealthy   = 0
	probeUnhealthy = 1
)

// runProbe is `raftq-node probe [--addr A] [--timeout D] [--service S]`: one
// grpc_health_v1 Check against a node, one line of output. It is the
// container health check, since an image FROM scratch has no shell or curl.
func runProbe(args []string) int {
	return probeMain(context.Background(), args, os.Getenv, os.Stdout, os.Stderr)
}

func probeMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("raftq-node probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7101", "gRPC address of the node to check")
	timeout := fs.Duration("timeout", 3*time.Second, "bound for connecting and the health call")
	service := fs.String("service", "", "health service name (empty: the whole server)")
	// The node's own files by default: in a container the probe runs with
	// the node's environment, so it dials as the node itself.
	ca := fs.String("tls-ca", getenv("RAFTQ_TLS_CA"), "CA file: probe over TLS (default $RAFTQ_TLS_CA)")
	cert := fs.String("tls-cert", getenv("RAFTQ_TLS_CERT"), "node certificate to present (default $RAFTQ_TLS_CERT)")
	key := fs.String("tls-key", getenv("RAFTQ_TLS_KEY"), "its key (default $RAFTQ_TLS_KEY)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: raftq-node probe [flags]\n\nExits 0 when the node's gRPC health status is SERVING, 1 otherwise.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return probeUnhealthy
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "probe: unexpected argument %q\n", fs.Arg(0))
		return probeUnhealthy
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "probe: --timeout must be positive, got %v\n", *timeout)
		return probeUnhealthy
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	creds, err := probeCreds(*ca, *cert, *key)
	if err != nil {
		fmt.Fprintf(stdout, "probe %s: %v\n", *addr, err)
		return probeUnhealthy
	}
	st, err := probe(ctx, *addr, *service, creds)
	if err != nil {
		fmt.Fprintf(stdout, "probe %s: %v\n", *addr, err)
		return probeUnhealthy
	}
	fmt.Fprintf(stdout, "probe %s: %s\n", *addr, st)
	if st != healthpb.HealthCheckResponse_SERVING {
		return probeUnhealthy
	}
	return probeHealthy
}

// probe asks addr for the health of service. WaitForReady makes a refused
// connection retry until ctx ends instead of failing at once, so a node that
// is still binding its port is given the whole timeout.
func probe(ctx context.Context, addr, service string, creds credentials.TransportCredentials) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, fmt.Errorf("health check: %w", err)
	}
	return resp.GetStatus(), nil
}

// probeCreds: a node certificate (checked as a member, whatever address
// the probe dials), a CA alone (checked by host name), or plaintext.
func probeCreds(ca, cert, key string) (credentials.TransportCredentials, error) {
	switch {
	case ca == "":
		return insecure.NewCredentials(), nil
	case cert != "" && key != "":
		st, err := tlsconf.Load(tlsconf.Files{CA: ca, Cert: cert, Key: key})
		if err != nil {
			return nil, err
		}
		return st.PeerCredentials(), nil
	default:
		cfg, err := tlsconf.ClientFiles(ca, "", "")
		if err != nil {
			return nil, err
		}
		return credentials.NewTLS(cfg), nil
	}
}
