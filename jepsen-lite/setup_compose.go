package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/raftq/raftq/jepsen-lite/compose"
	"github.com/raftq/raftq/jepsen-lite/nemesis"
)

// setupCompose starts the docker/ compose cluster under a unique project.
// teardown saves the container logs into the run directory and runs
// `docker compose down -v`; it runs on the uncancelled context so a ^C
// still removes the project.
func setupCompose(ctx context.Context, o *options, dir string) (cluster, nemesis.Network, func(), error) {
	if o.nodes != compose.Nodes {
		return nil, nil, nil, fmt.Errorf("compose backend: --nodes %d, but docker/compose.yaml has %d nodes", o.nodes, compose.Nodes)
	}
	root, err := os.Getwd()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("working directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(root, "docker", "compose.yaml")); err != nil {
		return nil, nil, nil, fmt.Errorf("compose backend runs from the repository root: %w", err)
	}
	cmd, err := compose.Require(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := compose.EnsureImage(ctx, root, logf); err != nil {
		return nil, nil, nil, err
	}
	p, err := compose.Up(ctx, compose.Options{Root: root, Shards: o.shards, Compose: cmd, Log: logf})
	if err != nil {
		return nil, nil, nil, err
	}
	cleanup := context.WithoutCancel(ctx)
	down := func() {
		logf("compose down -v %s (container logs: %s)", p.Name, filepath.Join(dir, "compose.log"))
		if err := p.Down(cleanup, filepath.Join(dir, "compose.log")); err != nil {
			logf("cleanup compose project %s: %v", p.Name, err)
		}
	}
	cl, err := compose.NewCluster(ctx, p)
	if err != nil {
		return nil, nil, down, err
	}
	teardown := func() {
		cl.Close()
		down()
	}
	return cl, &compose.Network{P: p}, teardown, nil
}
