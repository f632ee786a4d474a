package quickstart

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/internal/testenv"
)

// TestReadmeQuickStart runs README.md's quick start as written, from the
// repository's root, as a reader would, and fails where the README and the
// product disagree. It runs in private mount, network and pid namespaces:
// the checkout is seen through an overlay, so make's bin/ and the cluster's
// data/ land in a temporary directory and the real checkout is not touched;
// 127.0.0.1:7101-7403 are free whatever runs on the host; and stopping the
// namespace's first process ends everything the commands started.
func TestReadmeQuickStart(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTools(t, "unshare", "nsenter", "ip", "mount", "make", "bash", "go", "curl")
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := Parse(string(readme), "## Quick start")
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandbox(t, root)
	vars := map[string]string{}
	var running []*background
	for i, s := range steps {
		if s.Background {
			running = append(running, sb.start(t, i, s))
			continue
		}
		cmd := Substitute(s.Cmd, vars)
		out, err := sb.run(cmd, 3*time.Minute)
		if err != nil {
			dumpLogs(t, running)
			t.Fatalf("step %d: $ %s\nfailed: %v\n%s", i+1, cmd, err, out)
		}
		if err := Compare(s.Want, out, vars); err != nil {
			dumpLogs(t, running)
			t.Fatalf("step %d: $ %s\nprints other than the README shows: %v\nfull output:\n%s", i+1, cmd, err, out)
		}
		t.Logf("step %d: $ %s: as the README shows", i+1, cmd)
	}
	for _, bg := range running {
		if bg.exited() {
			dumpLogs(t, running)
			t.Fatalf("%q exited before the end of the quick start", bg.step.Cmd)
		}
	}
	// The console make run prints: its admin key written, a login with it
	// over TLS (the development CA) accepted, the cluster page served.
	const console = `for i in $(seq 60); do test -s data/certs/console.token && break; sleep 1; done; ` +
		`curl -fsS --max-time 10 --cacert data/certs/ca.crt -c data/console.jar -o /dev/null -w '%{http_code} ' ` +
		`-H 'Origin: https://127.0.0.1:7401' --data-urlencode "token=$(cat data/certs/console.token)" https://127.0.0.1:7401/console/login && ` +
		`curl -fsS --max-time 10 --cacert data/certs/ca.crt -b data/console.jar https://127.0.0.1:7401/console/ | grep -c 'key/console'`
	if out, err := sb.run(console, 2*time.Minute); err != nil || !strings.HasPrefix(strings.TrimSpace(out), "303 ") {
		dumpLogs(t, running)
		t.Fatalf("the console of make run: %v\n%s", err, out)
	}
	// The README's figure for a fresh cluster's data (about 25 MB): well
	// under what one 64 MiB log segment per raft group made (385 MB).
	if out, err := sb.run("du -sm data | cut -f1", time.Minute); err != nil {
		t.Fatalf("du: %v %s", err, out)
	} else if mb, _ := strconv.Atoi(strings.TrimSpace(out)); mb == 0 || mb > 64 {
		t.Fatalf("data/ holds %s MB after the quick start; the README says about 25", strings.TrimSpace(out))
	}
	// Ctrl-C in each terminal: every node stops calmly and says so.
	for _, bg := range running {
		bg.interrupt(t)
	}
	for _, bg := range running {
		bg.checkStop(t)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v %s", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// sandbox is the namespaces the quick start runs in; pid is their first
// process, as the host sees it.
type sandbox struct {
	root string
	pid  int
}

func newSandbox(t *testing.T, root string) *sandbox {
	t.Helper()
	dir := t.TempDir()
	up, work := filepath.Join(dir, "up"), filepath.Join(dir, "work")
	for _, d := range []string{up, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	setup := fmt.Sprintf("set -e; ip link set lo up; mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s; echo ready; exec sleep infinity",
		root, up, work, root)
	holder := exec.Command("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private", "--", "bash", "-c", setup)
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// unshare's own complaints when the namespaces end are noise; they
	// are shown if setting up fails.
	var holderErr strings.Builder
	holder.Stderr = &holderErr
	if err := holder.Start(); err != nil {
		testenv.SkipOrFail(t, "unshare: "+err.Error())
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("unexpected %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			_ = holder.Process.Kill()
			_ = holder.Wait()
			// No overlayfs or namespaces here: a developer's machine skips,
			// CI (RAFTQ_STRICT_FAULTS=1) fails.
			testenv.SkipOrFail(t, fmt.Sprintf("private namespaces with an overlay of the checkout: %v %s", err, holderErr.String()))
		}
	case <-time.After(30 * time.Second):
		_ = holder.Process.Kill()
		_ = holder.Wait()
		t.Fatal("private namespaces not ready after 30 s")
	}
	// unshare --fork runs the setup as its only child: the namespaces'
	// first process.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", holder.Process.Pid, holder.Process.Pid))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(kids)))
	if err != nil || pid == 0 {
		_ = holder.Process.Kill()
		_ = holder.Wait()
		t.Fatalf("the namespaces' first process: %q %v", kids, err)
	}
	t.Cleanup(func() {
		// Ending a pid namespace's first process ends every process in it.
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = holder.Wait()
	})
	return &sandbox{root: root, pid: pid}
}

// command is bash running line from the checkout's root inside the
// namespaces. GIT_OPTIONAL_LOCKS=0: the go build under make may ask git
// for the commit, which must not rewrite the real checkout's index.
func (sb *sandbox) command(ctx context.Context, line string) *exec.Cmd {
	c := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(sb.pid), "--mount", "--net", "--pid", "--",
		"bash", "-c", "cd "+sb.root+" && "+line)
	c.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	return c
}

// run runs a transcript command to its end and returns what it printed
// (stdout and stderr, as a terminal shows them).
func (sb *sandbox) run(line string, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := sb.command(ctx, line).CombinedOutput()
	return string(out), err
}

// background is a command that keeps running, with its output in a file.
type background struct {
	step Step
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs a background step in its own process group (a terminal of
// its own) and waits until its output shows the text the README quotes.
func (sb *sandbox) start(t *testing.T, i int, s Step) *background {
	t.Helper()
	log := filepath.Join(t.TempDir(), fmt.Sprintf("step%d.log", i+1))
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := sb.command(context.Background(), "exec "+s.Cmd)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatalf("start %q: %v", s.Cmd, err)
	}
	bg := &background{step: s, cmd: c, log: log, done: make(chan struct{})}
	go func() { _ = c.Wait(); close(bg.done) }()
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL) })
	if s.Until == "" {
		return bg
	}
	// A build on a busy 2-core machine may take minutes.
	deadline := time.Now().Add(10 * time.Minute)
	for !strings.Contains(bg.output(), s.Until) {
		if bg.exited() || time.Now().After(deadline) {
			t.Fatalf("%q: never printed %q; it printed:\n%s", s.Cmd, s.Until, bg.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("step %d: %s: up", i+1, s.Cmd)
	return bg
}

func (bg *background) output() string {
	b, _ := os.ReadFile(bg.log)
	return string(b)
}

func (bg *background) exited() bool {
	select {
	case <-bg.done:
		return true
	default:
		return false
	}
}

// interrupt sends what Ctrl-C sends: SIGINT to the terminal's process
// group.
func (bg *background) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-bg.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("interrupt %q: %v", bg.step.Cmd, err)
	}
}

var (
	nodeLine = regexp.MustCompile(`^\[(n[0-9]+)\] `)
	// exitReport is the run script's line for a node that exited while
	// the others ran.
	exitReport = regexp.MustCompile(`^raftq: n[0-9]+ exited \(`)
)

// checkStop waits for the command to say it stopped and checks the stop
// was calm: nothing at warn or error once stopping began, and every node's
// last line says it stopped. A node that exited earlier was reported with
// how to start it again.
func (bg *background) checkStop(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.HasSuffix(strings.TrimSpace(bg.output()), "raftq: stopped") {
		if time.Now().After(deadline) {
			t.Fatalf("%q: no \"raftq: stopped\" a minute after Ctrl-C; it printed:\n%s", bg.step.Cmd, bg.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := bg.output()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	stopping := false
	last := map[string]string{}
	for _, l := range lines {
		if strings.HasPrefix(l, "raftq: stopping") {
			stopping = true
		}
		if stopping && (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) {
			t.Errorf("%q: logged while stopping: %s", bg.step.Cmd, l)
		}
		if exitReport.MatchString(l) && !strings.Contains(l, "scripts/run-cluster.sh") {
			t.Errorf("%q: a node's exit reported without how to start it again: %s", bg.step.Cmd, l)
		}
		if m := nodeLine.FindStringSubmatch(l); m != nil {
			last[m[1]] = l
		}
	}
	if !stopping {
		t.Errorf("%q: no \"raftq: stopping\" line", bg.step.Cmd)
	}
	for node, l := range last {
		// A node killed earlier is reported as such (at once, or when the
		// stop finds it gone).
		if !strings.Contains(l, "msg=stopped") && !strings.Contains(out, "raftq: "+node+" exited") && !strings.Contains(out, "raftq: "+node+" had exited") {
			t.Errorf("%q: %s's last line is not its stop: %s", bg.step.Cmd, node, l)
		}
	}
	if t.Failed() {
		dumpLogs(t, []*background{bg})
	}
}

func dumpLogs(t *testing.T, running []*background) {
	t.Helper()
	for _, bg := range running {
		out := bg.output()
		if len(out) > 20000 {
			out = "...\n" + out[len(out)-20000:]
		}
		t.Logf("output of %q:\n%s", bg.step.Cmd, out)
	}
}
