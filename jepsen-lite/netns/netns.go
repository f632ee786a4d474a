// Package netns builds a private network for one jepsen-lite run: one
// network namespace per node and a hub namespace holding a Linux bridge,
// joined by veth pairs, on a /24 of 10.99.0.0/16 that no host interface
// uses. One more veth pair links the root namespace (the harness, at .1) to
// the bridge. Nothing is routed beyond that subnet (no default routes, no
// forwarding in the root namespace).
//
// The bridge lives in its own namespace because bridge netfilter is global
// per namespace: on a host whose root namespace has
// net.bridge.bridge-nf-call-iptables=1 and a FORWARD DROP policy (Docker),
// bridged traffic between nodes would be dropped by the host's firewall,
// and making it pass would mean editing that firewall. The hub namespace has
// an empty firewall of its own.
//
// Partitions are iptables DROP rules inside the node namespaces, so raft,
// gossip and node-to-node gRPC are all cut, while the harness still
// reaches every node, like Jepsen's clients beside their nodes.
//
// Every name carries a random run id, and a state file under StateDir
// records the run's pid and names, so Sweep can remove what a crashed run
// left behind without touching anyone else's namespaces.
package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StateDir holds one file per live run.
const StateDir = "/run/jepsen-lite"

// Net is the network of one run.
type Net struct {
	ID     string
	Hub    string // namespace of the bridge
	Subnet string // e.g. "10.99.37"
	Nodes  []NS
	state  string
}

// NS is one node's namespace.
type NS struct {
	Name string
	IP   string
}

// HostIP is the harness's address (root side of the uplink).
func (n *Net) HostIP() string { return n.Subnet + ".1" }

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Require checks for root and the tools this package runs.
func Require() error {
	if os.Geteuid() != 0 {
		return errors.New("the netns backend needs root (network namespaces, bridges, iptables)")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (apt-get install -y iproute2 iptables): %w", tool, err)
		}
	}
	return nil
}

// Create builds the bridge and n namespaces. On error it removes whatever
// it created.
func Create(ctx context.Context, n int) (_ *Net, err error) {
	if n < 1 || n > 9 {
		return nil, fmt.Errorf("nodes must be within 1..9, got %d", n)
	}
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("run id: %w", err)
	}
	id := hex.EncodeToString(b[:])
	subnet, err := freeSubnet(ctx, b[0])
	if err != nil {
		return nil, err
	}
	nw := &Net{ID: id, Hub: "jl-" + id + "-hub", Subnet: subnet}
	for i := 1; i <= n; i++ {
		nw.Nodes = append(nw.Nodes, NS{Name: fmt.Sprintf("jl-%s-n%d", id, i), IP: fmt.Sprintf("%s.%d", subnet, 10+i)})
	}
	// Record the names before creating anything, so a crash mid-way is swept.
	if err := nw.writeState(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = nw.Destroy(context.WithoutCancel(ctx))
		}
	}()
	up := nw.uplink()
	steps := [][]string{
		{"netns", "add", nw.Hub},
		{"-n", nw.Hub, "link", "set", "lo", "up"},
		{"-n", nw.Hub, "link", "add", "br0", "type", "bridge"},
		{"-n", nw.Hub, "link", "set", "br0", "up"},
		{"link", "add", up, "type", "veth", "peer", "name", "up0", "netns", nw.Hub},
		{"-n", nw.Hub, "link", "set", "up0", "master", "br0"},
		{"-n", nw.Hub, "link", "set", "up0", "up"},
		{"addr", "add", nw.HostIP() + "/24", "dev", up},
		{"link", "set", up, "up"},
	}
	for i, ns := range nw.Nodes {
		port := fmt.Sprintf("p%d", i+1)
		steps = append(steps,
			[]string{"netns", "add", ns.Name},
			[]string{"-n", nw.Hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
			[]string{"-n", nw.Hub, "link", "set", port, "master", "br0"},
			[]string{"-n", nw.Hub, "link", "set", port, "up"},
			[]string{"-n", ns.Name, "addr", "add", ns.IP + "/24", "dev", "eth0"},
			[]string{"-n", ns.Name, "link", "set", "eth0", "up"},
			[]string{"-n", ns.Name, "link", "set", "lo", "up"},
		)
	}
	for _, s := range steps {
		if err := run(ctx, "ip", s...); err != nil {
			return nil, err
		}
	}
	return nw, nil
}

// uplink is the root namespace's end of the link to the hub.
func (n *Net) uplink() string { return "jv" + n.ID }

// freeSubnet picks a 10.99.x.0/24 that no host address is in, starting at a
// random x so concurrent runs do not collide.
func freeSubnet(ctx context.Context, start byte) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-4", "-o", "addr", "show").Output()
	if err != nil {
		return "", fmt.Errorf("ip addr show: %w", err)
	}
	for k := range 250 {
		x := (int(start)+k)%250 + 1
		s := "10.99." + strconv.Itoa(x)
		if !strings.Contains(string(out), " "+s+".") {
			return s, nil
		}
	}
	return "", errors.New("no free 10.99.x.0/24 subnet")
}

func (n *Net) writeState() error {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d\nnetns %s\n", os.Getpid(), n.Hub)
	for _, ns := range n.Nodes {
		fmt.Fprintf(&b, "netns %s\n", ns.Name)
	}
	n.state = filepath.Join(StateDir, n.ID)
	if err := os.WriteFile(n.state, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// Destroy deletes the namespaces; the veth pairs and the bridge go with
// them. It keeps going past errors and reports the first.
func (n *Net) Destroy(ctx context.Context) error {
	var first error
	names := []string{n.Hub}
	for _, ns := range n.Nodes {
		names = append(names, ns.Name)
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		if err := run(ctx, "ip", "netns", "del", name); err != nil && first == nil && !strings.Contains(err.Error(), "No such file") {
			first = err
		}
	}
	// Gone with the hub normally; not if creation stopped half-way.
	_ = run(ctx, "ip", "link", "del", n.uplink())
	if n.state != "" {
		_ = os.Remove(n.state)
	}
	return first
}

// Sweep removes the networks of runs whose process is gone. It returns the
// run ids it removed.
func Sweep(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(StateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", StateDir, err)
	}
	var swept []string
	for _, e := range entries {
		path := filepath.Join(StateDir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n := &Net{ID: e.Name(), state: path}
		pid := 0
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			switch k {
			case "pid":
				pid, _ = strconv.Atoi(v)
			case "netns":
				if strings.HasSuffix(v, "-hub") {
					n.Hub = v
				} else {
					n.Nodes = append(n.Nodes, NS{Name: v})
				}
			}
		}
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // still running
		}
		// A run killed with -9 leaves its nodes running inside the
		// namespaces (deleting a namespace does not stop its processes).
		for _, ns := range n.Nodes {
			out, _ := exec.CommandContext(ctx, "ip", "netns", "pids", ns.Name).Output()
			for _, f := range strings.Fields(string(out)) {
				if p, err := strconv.Atoi(f); err == nil && p > 1 {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		_ = n.Destroy(ctx)
		swept = append(swept, n.ID)
	}
	return swept, nil
}
