// Package compose is jepsen-lite's second backend: the docker/ compose
// cluster (three containers, fixed IPs on a private bridge, gRPC published
// on 127.0.0.1) under a unique project name, with docker kill/start,
// pause/unpause, stop/start and docker/partition.sh as the nemesis's
// levers. Conventions follow docker/smoke.sh: random host port prefix and
// subnet, and `docker compose down -v` at the end whatever happened.
package compose

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Image is the tag the compose file runs; docker/build-image.sh builds it.
const Image = "raftq:dev"

// Nodes is the compose file's cluster size (services n1..n3).
const Nodes = 3

// dockerTimeout bounds one docker CLI call: a wedged engine must fail the
// run, not hang it.
const dockerTimeout = 60 * time.Second

// Project is one running compose project.
type Project struct {
	Root    string // repository root (docker/compose.yaml, docker/partition.sh)
	Name    string // compose project name
	Network string // cluster network: <project>_raftq
	Prefix  int    // host ports <prefix>101..103
	Subnet  string // first three octets of the /24
	Shards  int
	env     []string
	cmd     []string // docker compose, or docker-compose (v1)
}

// Options configure Up.
type Options struct {
	Root   string // repository root
	Shards int
	// Compose is the compose command (Require's answer).
	Compose []string
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// EnsureImage reuses raftq:dev when the engine has it, else builds it with
// docker/build-image.sh. Reuse is deliberate (a build costs a minute on a
// busy 2-core host); rebuild by hand after changing the node.
func EnsureImage(ctx context.Context, root string, log func(string, ...any)) error {
	if _, err := run(ctx, nil, "docker", "image", "inspect", "--format", "{{.Id}}", Image); err == nil {
		log("reusing image %s (rebuild: docker/build-image.sh)", Image)
		return nil
	}
	log("building image %s with docker/build-image.sh", Image)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(bctx, filepath.Join(root, "docker", "build-image.sh"), Image)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker/build-image.sh: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Require checks for a Docker engine and returns the compose command:
// the plugin (docker compose) or, as docker/smoke.sh accepts, v1's
// docker-compose.
func Require(ctx context.Context) ([]string, error) {
	if _, err := run(ctx, nil, "docker", "info", "--format", "{{.ServerVersion}}"); err != nil {
		return nil, fmt.Errorf("compose backend needs a Docker engine: %w", err)
	}
	if _, err := run(ctx, nil, "docker", "compose", "version"); err == nil {
		return []string{"docker", "compose"}, nil
	}
	if _, err := run(ctx, nil, "docker-compose", "version"); err != nil {
		return nil, fmt.Errorf("compose backend needs docker compose or docker-compose: %w", err)
	}
	return []string{"docker-compose"}, nil
}

// Up starts the cluster under a fresh project name on free host ports and
// a random subnet, trying three times as docker/smoke.sh does. On error
// nothing is left running.
func Up(ctx context.Context, o Options) (*Project, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		p := &Project{
			Root:   o.Root,
			Name:   fmt.Sprintf("jepsenlite%d-%d", os.Getpid(), attempt),
			Prefix: 30 + rand.IntN(30),
			Subnet: fmt.Sprintf("172.30.%d", 20+rand.IntN(200)),
			Shards: o.Shards,
			cmd:    o.Compose,
		}
		p.Network = p.Name + "_raftq"
		if !p.portsFree() {
			last = fmt.Errorf("ports %d101.. in use", p.Prefix)
			continue
		}
		p.env = append(os.Environ(),
			"RAFTQ_IMAGE="+Image,
			"RAFTQ_PORT_PREFIX="+strconv.Itoa(p.Prefix),
			"RAFTQ_SUBNET_PREFIX="+p.Subnet,
			"RAFTQ_SHARDS="+strconv.Itoa(p.Shards),
			"RAFTQ_LOG_LEVEL=info",
			// partition.sh reads these.
			"RAFTQ_PROJECT="+p.Name,
			"RAFTQ_NETWORK="+p.Network,
		)
		o.Log("compose project %s: subnet %s.0/24, gRPC on 127.0.0.1:%d101..%d103", p.Name, p.Subnet, p.Prefix, p.Prefix)
		if _, err := p.compose(ctx, "up", "-d"); err != nil {
			last = err
			// A half-created project (network clash, port race) goes away
			// before the next attempt.
			_ = p.Down(context.WithoutCancel(ctx), "")
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			o.Log("compose up failed, retrying: %v", err)
			continue
		}
		return p, nil
	}
	return nil, fmt.Errorf("compose up: %w", last)
}

func (p *Project) portsFree() bool {
	for _, s := range []int{101, 102, 103, 401, 402, 403, 501, 502, 503} {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d%d", p.Prefix, s))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// Down saves the containers' logs to logPath (if set) and removes the
// project with its volumes. ctx should not be the run's cancelled context.
func (p *Project) Down(ctx context.Context, logPath string) error {
	var errs []error
	if logPath != "" {
		out, err := p.compose(ctx, "logs", "--no-color", "--timestamps")
		if err != nil {
			errs = append(errs, err)
		}
		if werr := os.WriteFile(logPath, out, 0o644); werr != nil {
			errs = append(errs, fmt.Errorf("save compose logs: %w", werr))
		}
	}
	// Paused containers cannot be stopped; heal-all reconnects isolated
	// ones, which does not matter here but keeps down from tripping.
	_, _ = p.compose(ctx, "unpause")
	if _, err := p.compose(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Addr is the published gRPC address of slot i (service n<i+1>).
func (p *Project) Addr(i int) string { return fmt.Sprintf("127.0.0.1:%d%d", p.Prefix, 101+i) }

// PeerAddr is slot i's published peer port (docker/compose.yaml).
func (p *Project) PeerAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d%d", p.Prefix, 501+i) }

// Container is the container id of slot i.
func (p *Project) Container(ctx context.Context, i int) (string, error) {
	out, err := p.compose(ctx, "ps", "-a", "-q", service(i))
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(out))
	if id == "" {
		return "", fmt.Errorf("no container for %s in project %s", service(i), p.Name)
	}
	return strings.Fields(id)[0], nil
}

func service(i int) string { return "n" + strconv.Itoa(i+1) }

func (p *Project) compose(ctx context.Context, args ...string) ([]byte, error) {
	full := append(append([]string{}, p.cmd[1:]...), "-p", p.Name, "-f", filepath.Join(p.Root, "docker", "compose.yaml"))
	return run(ctx, p.env, p.cmd[0], append(full, args...)...)
}

// run executes one command with dockerTimeout; stderr goes into the error.
func run(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, name, args...)
	if env != nil {
		cmd.Env = env
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func dial(addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}
