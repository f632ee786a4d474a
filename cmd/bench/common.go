package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/tlsconf"
)

// devCA is where make run keeps its development CA (scripts/run-cluster.sh).
const (
	devCA   = "data/certs/ca.crt"
	devCert = "data/certs/client-admin.crt"
	devKey  = "data/certs/client-admin.key"
)

// dial connects to the cluster and waits for its leaders to settle
// (--settle), returning where they are.
func dial(ctx context.Context, cfg config, stderr io.Writer) (*client.Client, placement, error) {
	c, err := dialClient(ctx, cfg)
	if err != nil {
		return nil, placement{}, err
	}
	return c, settle(ctx, c, cfg.Settle, stderr), nil
}

// dialClient connects to the cluster with the bench's credentials and
// extra, without waiting for leaders: a second client of a run, with
// connections of its own.
func dialClient(ctx context.Context, cfg config, extra ...client.Option) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var opts []client.Option
	ca, cert, key := cfg.CA, cfg.Cert, cfg.Key
	if ca == "" && !cfg.Insecure {
		if _, err := os.Stat(devCA); err == nil {
			ca = devCA
			if _, err := os.Stat(devCert); err == nil && cert == "" && key == "" {
				cert, key = devCert, devKey
			}
		}
	}
	if ca != "" && !cfg.Insecure {
		tc, err := tlsconf.ClientFiles(ca, cert, key)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.WithTLS(credentials.NewTLS(tc)))
	}
	if cfg.Token != "" {
		opts = append(opts, client.WithToken(cfg.Token))
	}
	c, err := client.Dial(dctx, cfg.Addrs, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", strings.Join(cfg.Addrs, ","), err)
	}
	return c, nil
}

// queueName makes a fresh queue per run so runs never see each other's
// messages.
func queueName(cfg config, suffix string) string {
	return fmt.Sprintf("%s-%s-%d", cfg.Queue, suffix, time.Now().UnixNano()%1_000_000_000)
}

func createQueue(ctx context.Context, c *client.Client, name string, o client.QueueOptions) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.CreateQueue(cctx, name, o); err != nil {
		return fmt.Errorf("create bench queue: %w", err)
	}
	return nil
}

// deleteQueue removes a run's queue, best effort: a leftover queue costs
// disk, not correctness.
func deleteQueue(c *client.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.DeleteQueue(ctx, name)
}

// defaultQueue is the policy of the throughput workloads: the server's
// defaults (30 s visibility, 10 receives, 5 min dedup window), a standard
// queue, with --dedup-window if given.
func defaultQueue(cfg config) client.QueueOptions {
	return client.QueueOptions{DedupWindow: cfg.DedupWindow}
}
