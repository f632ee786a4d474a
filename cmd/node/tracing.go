package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"go.opentelemetry.io/otel"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/server"
)

// defaultTraceSample is --trace-sample's default: the share of calls
// without a sampled parent that start a trace of their own. Calls from a
// tracing client follow its decision whatever this is.
const defaultTraceSample = 0.01

// checkTracing validates the tracing flags (docs/tracing.md).
func (c *config) checkTracing() error {
	if c.TraceSample < 0 || c.TraceSample > 1 {
		return fmt.Errorf("--trace-sample must be within 0..1 (a share of calls without a sampled parent), got %v", c.TraceSample)
	}
	if c.OTLPEndpoint == "" {
		if c.OTLPInsecure {
			return fmt.Errorf("--otlp-insecure needs --otlp-endpoint")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(c.OTLPEndpoint)
	if err != nil {
		return fmt.Errorf("--otlp-endpoint %q: want HOST:PORT of an OTLP/gRPC receiver: %w", c.OTLPEndpoint, err)
	}
	if p, err := strconv.Atoi(port); host == "" || err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("--otlp-endpoint %q: want HOST:PORT of an OTLP/gRPC receiver, with a host and a port in 1..65535", c.OTLPEndpoint)
	}
	return nil
}

// nodeTracing is the node's span pipeline: an OTLP/gRPC exporter behind a
// batch processor. A nil *nodeTracing is tracing off.
type nodeTracing struct {
	tp   *sdktrace.TracerProvider
	once sync.Once
	err  error
}

// startTracing builds the pipeline when --otlp-endpoint is set. Nothing
// connects yet: spans wait in the batch processor until the receiver
// answers, and are dropped past its queue (2048 spans) rather than held.
func startTracing(ctx context.Context, cfg *config, log *slog.Logger) (*nodeTracing, error) {
	if cfg.OTLPEndpoint == "" {
		return nil, nil
	}
	// The SDK reports export failures (a collector that does not answer)
	// only through OpenTelemetry's process-wide error handler, which
	// writes plain text to stderr and would break --log-format json. The
	// node is the one user of OpenTelemetry in this process, so it routes
	// them into its own log, rate-limited by the batcher's export period.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("trace export failed", "endpoint", cfg.OTLPEndpoint, "err", err)
	}))
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint)}
	if cfg.OTLPInsecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	} else {
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint %s: %w", cfg.OTLPEndpoint, err)
	}
	// Schemaless: the attributes name the service and the node without
	// tying the resource to one semantic-conventions version.
	res := resource.NewSchemaless(
		attribute.String("service.name", "raftq-node"),
		attribute.String("service.instance.id", cfg.NodeID),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.TraceSample))),
	)
	return &nodeTracing{tp: tp}, nil
}

// serverOptions adds the message calls' server spans to the client port.
func (t *nodeTracing) serverOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(server.TraceInterceptor(t.tp, propagation.TraceContext{}))}
}

// shutdown flushes the spans still batched and stops the exporter, within
// ctx; later calls return the first one's result.
func (t *nodeTracing) shutdown(ctx context.Context, log *slog.Logger) error {
	if t == nil {
		return nil
	}
	t.once.Do(func() {
		if t.err = t.tp.Shutdown(ctx); t.err != nil {
			log.Warn("tracing: spans not all exported at stop", "err", t.err)
		}
	})
	return t.err
}
