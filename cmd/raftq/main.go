// Command raftq is the command-line client of a raftq cluster: queue
// administration, sending and receiving, settling leases, message look-ups
// and dead-letter handling. Run "raftq --help" for the command list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/raftq/raftq/client"
	"github.com/raftq/raftq/internal/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes.
const (
	exitOK          = 0
	exitServer      = 1 // the cluster answered with an error
	exitUsage       = 2 // bad command line
	exitUnavailable = 3 // the cluster could not be reached or had no leader in time
)

// defaultAddr is the three nodes `make run` starts: with one of them down
// the CLI still finds the cluster.
const defaultAddr = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
}

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	g              globals
}

// run is the whole program behind main, with its environment passed in so
// tests can drive it.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "raftq")
		return exitOK
	}
	defAddr := defaultAddr
	if v := getenv("RAFTQ_ADDR"); v != "" {
		defAddr = v
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, g: newGlobals(defAddr)}
	a.g.ca, a.g.cert, a.g.key = getenv("RAFTQ_CA"), getenv("RAFTQ_CERT"), getenv("RAFTQ_KEY")
	a.g.insecure, _ = strconv.ParseBool(getenv("RAFTQ_INSECURE"))
	a.g.token, a.g.tokenFile = getenv("RAFTQ_TOKEN"), getenv("RAFTQ_TOKEN_FILE")
	top := newFlagSet("raftq", stderr)
	a.g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.usage(stdout)
			return exitOK
		}
		fmt.Fprintln(stderr, `usage: raftq [global flags] COMMAND [args] [flags] (see raftq --help)`)
		return exitUsage
	}
	rest := top.Args()
	switch {
	case len(rest) == 0:
		a.usage(stderr)
		return exitUsage
	case rest[0] == "help":
		return a.help(rest[1:])
	}
	cmd, rest, ok := lookup(rest)
	if !ok {
		return a.unknown(rest)
	}
	fs := newFlagSet("raftq "+cmd.path, stderr)
	a.g.register(fs) // globals may follow the command too
	bind := cmd.setup(a, fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, cmd, fs)
			return exitOK
		}
		fmt.Fprintf(stderr, "%s (see raftq %s --help)\n", usageLine(cmd), cmd.path)
		return exitUsage
	}
	act, err := bind(pos)
	if err != nil {
		return a.fail(err, cmd)
	}
	out := &output{w: stdout, json: a.g.json}
	if cmd.offline {
		return a.fail(act(ctx, nil, out), cmd)
	}
	if len(a.g.seeds()) == 0 {
		return a.fail(usagef("--addr is empty"), cmd)
	}
	if a.g.timeout <= 0 {
		return a.fail(usagef("--timeout %v is not positive", a.g.timeout), cmd)
	}
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, a.g.timeout+a.g.wait)
	defer cancel()
	c, err := a.dial(ctx)
	if err != nil {
		return a.fail(a.unreachable(err), cmd)
	}
	defer func() { _ = c.Close() }()
	if a.g.untimed {
		ctx = runCtx
	}
	return a.fail(act(ctx, c, out), cmd)
}

// lookup finds the command named by the first one or two words.
func lookup(args []string) (command, []string, bool) {
	for _, c := range commands() {
		words := strings.Fields(c.path)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.path {
			return c, args[len(words):], true
		}
	}
	return command{}, args, false
}

// group lists the commands whose first word is word ("queue").
func group(word string) []command {
	var out []command
	for _, c := range commands() {
		if first, _, _ := strings.Cut(c.path, " "); first == word && strings.Contains(c.path, " ") {
			out = append(out, c)
		}
	}
	return out
}

func isHelp(s string) bool {
	return s == "--help" || s == "-help" || s == "-h" || s == "--h" || s == "help"
}

// unknown answers a command line that names no command: a group's list for
// "raftq queue" or "raftq queue --help", else an error.
func (a *app) unknown(args []string) int {
	if cs := group(args[0]); len(cs) > 0 {
		if len(args) > 1 && isHelp(args[1]) {
			groupUsage(a.stdout, args[0], cs)
			return exitOK
		}
		if len(args) == 1 || strings.HasPrefix(args[1], "-") {
			fmt.Fprintf(a.stderr, "raftq: %q needs a subcommand\n", args[0])
			groupUsage(a.stderr, args[0], cs)
			return exitUsage
		}
	}
	fmt.Fprintf(a.stderr, "raftq: unknown command %q (see raftq --help)\n", strings.Join(args[:min(len(args), 2)], " "))
	return exitUsage
}

// help answers "raftq help [COMMAND]".
func (a *app) help(words []string) int {
	if len(words) == 0 {
		a.usage(a.stdout)
		return exitOK
	}
	if c, rest, ok := lookup(words); ok && len(rest) == 0 {
		fs := newFlagSet("raftq "+c.path, a.stderr)
		g := newGlobals(defaultAddr)
		g.register(fs)
		c.setup(&app{g: g}, fs)
		commandUsage(a.stdout, c, fs)
		return exitOK
	}
	if cs := group(words[0]); len(cs) > 0 && len(words) == 1 {
		groupUsage(a.stdout, words[0], cs)
		return exitOK
	}
	fmt.Fprintf(a.stderr, "raftq: unknown command %q (see raftq --help)\n", strings.Join(words, " "))
	return exitUsage
}

// dial connects to the cluster. A command told to wait for the cluster
// (cluster status --wait) also waits for a node to answer at all, as
// after make run & in a script: Dial is tried again until the wait ends.
func (a *app) dial(ctx context.Context) (*client.Client, error) {
	until := time.Now().Add(a.g.wait)
	for {
		opts, err := a.g.tlsOptions()
		if err != nil {
			return nil, err
		}
		topts, err := a.g.tokenOptions()
		if err != nil {
			return nil, err
		}
		opts = append(opts, topts...)
		c, err := client.Dial(ctx, a.g.seeds(), opts...)
		if err == nil || !a.g.waitForNodes || !errors.Is(err, client.ErrUnavailable) || time.Now().After(until) {
			return c, err
		}
		t := time.NewTimer(statusPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// unreachable says, when no node answered, where the CLI looked and how to
// point it elsewhere.
func (a *app) unreachable(err error) error {
	if !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	why := "no answer"
	switch s := err.Error(); {
	case strings.Contains(s, "takes TLS connections only"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s takes TLS connections only: pass --ca FILE or set RAFTQ_CA "+
			"(the CA that signed the nodes' certificates; make run keeps one in %s)", strings.Join(a.g.seeds(), ","), devCA)}
	case strings.Contains(s, "requires credentials"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s requires credentials (it runs --client-auth require): "+
			"pass an API key with --token-file, --token or RAFTQ_TOKEN (raftq keys create makes one), "+
			"or a client certificate with --cert and --key (raftq certs client NAME makes one)", strings.Join(a.g.seeds(), ","))}
	case strings.Contains(s, "is not valid on this cluster") || strings.Contains(s, "API key is malformed"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s refused the API key: %s", strings.Join(a.g.seeds(), ","), message(err))}
	case strings.Contains(s, "tls: certificate required") || strings.Contains(s, "unknown service raftq.v1"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s asks for a member's certificate: is it a peer port (nodes only)? "+
			"clients use the gRPC port (--grpc-bind)", strings.Join(a.g.seeds(), ","))}
	case strings.Contains(s, "tls: unknown certificate") || strings.Contains(s, "tls: bad certificate"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s refused --cert %s: it is not signed by the cluster's CA",
			strings.Join(a.g.seeds(), ","), a.g.cert)}
	case strings.Contains(s, "first record does not look like a TLS handshake"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s does not speak TLS (it runs with --insecure) and --ca %s asks for it: "+
			"leave --ca and RAFTQ_CA unset for such a node", strings.Join(a.g.seeds(), ","), a.g.ca)}
	case strings.Contains(s, "certificate signed by unknown authority") || strings.Contains(s, "certificate is valid for"):
		return &unreachableError{err: err, msg: fmt.Sprintf("the node at %s presented a certificate --ca %s does not vouch for: %v",
			strings.Join(a.g.seeds(), ","), a.g.ca, err)}
	case strings.Contains(s, "connection refused"):
		why = "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		why = fmt.Sprintf("no answer within --timeout %v", a.g.timeout)
	}
	return &unreachableError{err: err, msg: fmt.Sprintf("cannot reach the cluster at %s (%s): is it running (make run starts one)? "+
		"--addr or RAFTQ_ADDR point the CLI at other nodes", strings.Join(a.g.seeds(), ","), why)}
}

// unreachableError is a dial that found no node; its message replaces the
// client's, which lists every seed's connection error.
type unreachableError struct {
	err error
	msg string
}

func (e *unreachableError) Error() string { return e.msg }
func (e *unreachableError) Unwrap() error { return e.err }

// fail prints err as one line on stderr and picks the exit code.
func (a *app) fail(err error, cmd command) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "raftq: %s\n", a.message(err))
	code := exitCode(err)
	if code == exitUsage {
		fmt.Fprintf(a.stderr, "%s (see raftq %s --help)\n", usageLine(cmd), cmd.path)
	}
	return code
}

// reportedError is a failure told in words of the CLI's own: msg is what
// stderr gets (for an ack, a count: each receipt's error is in the table),
// the exit code comes from err.
type reportedError struct {
	err error
	msg string
}

func (e *reportedError) Error() string { return e.msg }
func (e *reportedError) Unwrap() error { return e.err }

// message is err's text for stderr: the deadline named as the flag that
// set it, else message's rendering.
func (a *app) message(err error) string {
	var u *unreachableError
	var r *reportedError
	switch {
	case errors.As(err, &u):
		return u.msg
	case errors.As(err, &r):
		return r.msg
	case errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within --timeout %v (raise it with --timeout): %s", a.g.timeout, message(err))
	}
	return message(err)
}

// message prefers the server's own words ("queue \"x\" not found") over the
// client's call-site context, which only repeats the command line.
func message(err error) string {
	var e *client.Error
	if errors.As(err, &e) && e.Code != codes.Unavailable && e.Code != codes.DeadlineExceeded {
		if e.RetryAfter > 0 && !strings.Contains(e.Msg, "retry in") {
			// Past a quota or a node's limit: say when to come back.
			return fmt.Sprintf("%s (retry in %v)", e.Msg, e.RetryAfter)
		}
		return e.Msg
	}
	return strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", " "), "raftq ")
}

func exitCode(err error) int {
	var u *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &u):
		return exitUsage
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded,
		errors.Is(err, errNotReady):
		return exitUnavailable
	}
	return exitServer
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "raftq: command-line client for a raftq cluster")
	fmt.Fprintln(w, "\nusage: raftq [global flags] COMMAND [args] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.path+" "+c.args), c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nglobal flags (before or after the command):")
	fs := newFlagSet("raftq", w)
	g := newGlobals(defaultAddr)
	g.register(fs)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nexit codes: 0 ok, 1 server error, 2 usage, 3 cluster unavailable")
	fmt.Fprintln(w, `run "raftq COMMAND --help" for a command's flags`)
}

// usageLine is "usage: raftq PATH ARGS [flags]".
func usageLine(c command) string {
	return "usage: " + strings.Join(strings.Fields("raftq "+c.path+" "+c.args+" [flags]"), " ")
}

func commandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\n%s\n\nflags:\n", usageLine(c), c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func groupUsage(w io.Writer, word string, cs []command) {
	fmt.Fprintf(w, "usage: raftq %s SUBCOMMAND [args] [flags]\n\nsubcommands:\n", word)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.path+" "+c.args), c.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nrun \"raftq %s SUBCOMMAND --help\" for its flags\n", word)
}
