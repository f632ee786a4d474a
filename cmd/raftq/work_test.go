package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/client/clienttest"
	"github.com/raftq/raftq/internal/testenv"
	"github.com/raftq/raftq/worker"
)

// syncBuffer is a bytes.Buffer safe to read while raftq work writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWork runs "raftq work" in the background; stop ends it as SIGINT
// would (its context) and returns the exit code.
func startWork(t *testing.T, addr string, args ...string) (stdout, stderr *syncBuffer, stop func() int) {
	t.Helper()
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	env := func(k string) string {
		if k == "RAFTQ_ADDR" {
			return addr
		}
		return ""
	}
	go func() {
		done <- run(ctx, append([]string{"work"}, args...), env, strings.NewReader(""), stdout, stderr)
	}()
	var once sync.Once
	code := -1
	stop = func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("raftq work did not stop; stderr:\n%s", stderr)
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

func getMessage(t *testing.T, addr, id string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, addr, "message", "get", id, "--json")), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// docBlock returns the body of the first fenced block of lang in
// docs/jobs.md after the line marker, so the docs' examples are what runs.
func docBlock(t *testing.T, marker, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/jobs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("docs/jobs.md has no %q", marker)
	}
	_, after, ok = strings.Cut(after, "```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/jobs.md has no %s block after %q", lang, marker)
	}
	block, _, _ := strings.Cut(after, "```")
	return block
}

// The shell and Python examples of docs/jobs.md, as written there: exit 0
// acks, a failure nacks with stderr's tail, and the message's fields reach
// the command.
func TestWorkDocExamples(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "resize.sh")
	if err := os.WriteFile(script, []byte(docBlock(t, "A shell worker", "sh")), 0o644); err != nil {
		t.Fatal(err)
	}
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "images")
	good := strings.TrimSpace(mustRun(t, a, "send", "images", "cat.png", "--type", "resize", "--attr", "user=ann"))
	bad := strings.TrimSpace(mustRun(t, a, "send", "images", "dog.png", "--type", "resize"))

	stdout, stderr, stop := startWork(t, a, "images", "--concurrency", "4", "--job-timeout", "1m", "--", "sh", script)
	clienttest.WaitFor(t, "the good job acked", func() bool { return s.Count("images", clienttest.Acked) == 1 })
	clienttest.WaitFor(t, "the bad job nacked", func() bool { return getMessage(t, a, bad)["last_error"] != "" })
	if code := stop(); code != exitOK {
		t.Fatalf("raftq work exit %d; stderr:\n%s", code, stderr)
	}
	if want := "job " + good + " (resize, delivery 1) for ann: 7 bytes\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q lacks %q", stdout, want)
	}
	if got, want := getMessage(t, a, bad)["last_error"], "job "+bad+" has no user attribute"; got != want {
		t.Errorf("nack error %q, want %q", got, want)
	}
	for _, want := range []string{good + " acked after", bad + " nacked after", "raftq work: stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	testenv.RequireTools(t, "python3") // .ci/run installs it: under CI the example must run
	py := filepath.Join(dir, "send_email.py")
	if err := os.WriteFile(py, []byte(docBlock(t, "A Python worker", "python")), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, a, "queue", "create", "mail")
	mustRun(t, a, "send", "mail", `{"to": "ann@example.com"}`, "--attr", "tenant=acme")
	noTo := strings.TrimSpace(mustRun(t, a, "send", "mail", `{}`))
	stdout, stderr, stop = startWork(t, a, "mail", "--concurrency", "8", "--", "python3", py)
	clienttest.WaitFor(t, "the mail job acked", func() bool { return s.Count("mail", clienttest.Acked) == 1 })
	clienttest.WaitFor(t, "the job without recipient nacked", func() bool { return getMessage(t, a, noTo)["last_error"] != "" })
	stop()
	if want := "mail to ann@example.com (tenant acme, delivery 1)\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout %q lacks %q; stderr:\n%s", stdout, want, stderr)
	}
	if got, want := getMessage(t, a, noTo)["last_error"], "job "+noTo+": no recipient"; got != want {
		t.Errorf("nack error %q, want %q", got, want)
	}
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// At --job-timeout the command's whole process group dies, children
// included, and the message is nacked with "timeout".
func TestWorkTimeoutKillsProcessGroup(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "slow")
	id := strings.TrimSpace(mustRun(t, a, "send", "slow", "x"))
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	start := time.Now()
	_, stderr, stop := startWork(t, a, "slow", "--job-timeout", "300ms", "--", "sh", "-c", `sleep 60 & echo $! > "$1"; wait`, "sh", pidFile)
	clienttest.WaitFor(t, "the timeout nack", func() bool { return getMessage(t, a, id)["last_error"] != "" })
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("nacked after %v, want about the 300ms timeout", took)
	}
	if got := getMessage(t, a, id)["last_error"]; got != "timeout" {
		t.Fatalf("nack error %q, want timeout; stderr:\n%s", got, stderr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	clienttest.WaitFor(t, "the command's child killed", func() bool { return !alive(pid) })
	stop()
	_ = syscall.Kill(pid, syscall.SIGKILL) // in case the test failed above
}

// A stop (SIGINT, SIGTERM) takes no new message but lets the running
// command finish and settles it.
func TestWorkStopsGracefully(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "q")
	mustRun(t, a, "send", "q", "one")
	_, stderr, stop := startWork(t, a, "q", "--", "sh", "-c", "sleep 0.7; cat >/dev/null")
	clienttest.WaitFor(t, "the job leased", func() bool { return s.Count("q", clienttest.Leased) == 1 })
	mustRun(t, a, "send", "q", "two")
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if s.Count("q", clienttest.Acked) != 1 || s.Count("q", clienttest.Ready) != 1 {
		t.Fatalf("after the stop: %d acked, %d ready; want the running job acked, the other left; stderr:\n%s",
			s.Count("q", clienttest.Acked), s.Count("q", clienttest.Ready), stderr)
	}
}

func TestWorkUsage(t *testing.T) {
	const nowhere = "127.0.0.1:1"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"work", "q"}, "want QUEUE -- COMMAND [ARG...], got 1 argument(s)"},
		{[]string{"work", "q", "--concurrency", "0", "--", "true"}, "--concurrency 0 outside 1-1000"},
		{[]string{"work", "q", "--concurrency", "1001", "--", "true"}, "--concurrency 1001 outside 1-1000"},
		{[]string{"work", "q", "--job-timeout", "0s", "--", "true"}, "--job-timeout 0s: give a positive duration"},
		{[]string{"work", "q", "--job-timeout", "169h", "--", "true"}, "--job-timeout 169h0m0s is above the limit 168h0m0s"},
		{[]string{"work", "q", "--visibility", "1ms", "--", "true"}, "--visibility 1ms is below 3ms"},
		{[]string{"work", "q", "--visibility", "13h", "--", "true"}, "--visibility 13h0m0s is above the limit 12h0m0s"},
		{[]string{"work", "q", "--drain", "-1s", "--", "true"}, "--drain -1s is negative"},
		{[]string{"work", "q", "--", "no-such-command-raftq"}, `COMMAND "no-such-command-raftq": exec: "no-such-command-raftq": executable file not found`},
	} {
		r := raftq(t, nowhere, "", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("raftq %v: exit %d, stderr %q; want exit %d with %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

func TestTailWriter(t *testing.T) {
	tw := &tailWriter{max: 4}
	_, _ = tw.Write([]byte("ab"))
	_, _ = tw.Write([]byte("cdéf")) // é is two bytes
	if got := tw.String(); got != "déf" {
		t.Fatalf("tail %q, want %q", got, "déf")
	}
	tw = &tailWriter{max: 3}
	_, _ = tw.Write([]byte("xéz")) // the cut falls inside é
	if got := tw.String(); got != "éz" && got != "z" {
		t.Fatalf("tail %q starts inside a character", got)
	}
}

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"user": "USER", "user-id": "USER_ID", "a.b c": "A_B_C", "X_9": "X_9", "é": "_"} {
		if got := envName(in); got != want {
			t.Errorf("envName(%q) = %q, want %q", in, got, want)
		}
	}
}

// Pause and resume from the CLI: a paused queue takes sends but delivers
// nothing, and stats, get and list show it.
func TestQueuePauseResume(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "jobs")
	if out := mustRun(t, a, "queue", "pause", "jobs"); out != "paused queue \"jobs\"\n" {
		t.Fatalf("pause printed %q", out)
	}
	mustRun(t, a, "send", "jobs", "x")
	if out := mustRun(t, a, "receive", "jobs", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("receive from a paused queue: %s", out)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, a, "queue", "stats", "jobs", "--json")), &st); err != nil || st["paused"] != true || st["ready"] != float64(1) {
		t.Fatalf("stats of a paused queue: %v %v", st, err)
	}
	if out := mustRun(t, a, "queue", "get", "jobs"); !hasRow(out, "paused", "true") {
		t.Fatalf("queue get:\n%s", out)
	}
	if out := mustRun(t, a, "queue", "list"); !strings.Contains(out, "PAUSED") || !strings.Contains(strings.Split(out, "\n")[1], "true") {
		t.Fatalf("queue list:\n%s", out)
	}
	if out := mustRun(t, a, "queue", "resume", "jobs", "--json"); !strings.Contains(out, `"paused": false`) {
		t.Fatalf("resume --json printed %q", out)
	}
	if out := mustRun(t, a, "receive", "jobs", "--json"); !strings.Contains(out, `"body": "x"`) {
		t.Fatalf("receive after resume: %s", out)
	}
	if r := raftq(t, a, "", "queue", "pause", "nosuch"); r.code != exitServer || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("pause of a missing queue: %+v", r)
	}
}

// Two keys with one variable name give it the same value every time.
func TestJobEnvCollidingKeys(t *testing.T) {
	m := &worker.Message{Message: client.Message{ID: "0-9", Attributes: map[string]string{"user_id": "b", "user-id": "a"}, ReceiveCount: 2}}
	for range 20 { // map order varies from run to run
		env := jobEnv("q", m)
		var last, attrs string
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "RAFTQ_ATTR_USER_ID="); ok {
				last = v
			}
			if v, ok := strings.CutPrefix(kv, "RAFTQ_ATTRIBUTES="); ok {
				attrs = v
			}
		}
		if last != "b" {
			t.Fatalf("RAFTQ_ATTR_USER_ID ends as %q, want b (of user_id, the later key)", last)
		}
		if attrs != `{"user-id":"a","user_id":"b"}` {
			t.Fatalf("RAFTQ_ATTRIBUTES=%s", attrs)
		}
		if !slices.Contains(env, "RAFTQ_RECEIVE_COUNT=2") || !slices.Contains(env, "RAFTQ_MESSAGE_ID=0-9") {
			t.Fatalf("env %v", env)
		}
	}
}

// --result-from-stdout: a command's stdout is its job's result, which
// message wait shows; stdout past the result limit fails the job.
func TestWorkResultFromStdout(t *testing.T) {
	s := clienttest.NewServer(t)
	a := s.Addr
	mustRun(t, a, "queue", "create", "thumbs")
	small := strings.TrimSpace(mustRun(t, a, "send", "thumbs", "cat.png"))
	big := strings.TrimSpace(mustRun(t, a, "send", "thumbs", "huge"))
	script := `read -r f; if [ "$f" = huge ]; then head -c 70000 /dev/zero; else echo "thumb of $f"; fi`
	stdout, stderr, stop := startWork(t, a, "thumbs", "--result-from-stdout", "--", "sh", "-c", script)
	clienttest.WaitFor(t, "the small job acked", func() bool { return s.Count("thumbs", clienttest.Acked) == 1 })
	clienttest.WaitFor(t, "the big job nacked", func() bool { return getMessage(t, a, big)["last_error"] != "" })
	stop()
	var m map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, a, "message", "wait", "thumbs", small, "--json")), &m); err != nil {
		t.Fatal(err)
	}
	if m["result"] != "thumb of cat.png\n" {
		t.Errorf("result %q, want the command's stdout; stderr:\n%s", m["result"], stderr)
	}
	if got := getMessage(t, a, big)["last_error"]; !strings.Contains(got.(string), "limit of a job result") {
		t.Errorf("big job's error %q, want the result limit", got)
	}
	if stdout.String() != "" {
		t.Errorf("stdout passed through: %q", stdout)
	}
}
