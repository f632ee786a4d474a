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
	"strings"
	"text/tabwriter"

	"github.com/raftq/raftq/client"
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

const defaultAddr = "127.0.0.1:7101"

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
	defAddr := defaultAddr
	if v := getenv("RAFTQ_ADDR"); v != "" {
		defAddr = v
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, g: newGlobals(defAddr)}
	top := newFlagSet("raftq", stderr)
	a.g.register(top)
	top.Usage = func() { a.usage(stderr) }
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			a.usage(stdout)
			return exitOK
		}
		return exitUsage
	}
	rest := top.Args()
	if len(rest) == 0 || rest[0] == "help" {
		if len(rest) == 0 {
			a.usage(stderr)
			return exitUsage
		}
		a.usage(stdout)
		return exitOK
	}
	cmd, rest, ok := lookup(rest)
	if !ok {
		fmt.Fprintf(stderr, "raftq: unknown command %q (see raftq --help)\n", strings.Join(rest[:min(len(rest), 2)], " "))
		return exitUsage
	}
	fs := newFlagSet("raftq "+cmd.path, stderr)
	a.g.register(fs) // globals may follow the command too
	bind := cmd.setup(a, fs)
	fs.Usage = func() { commandUsage(stderr, cmd, fs) }
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(stdout, cmd, fs)
			return exitOK
		}
		return exitUsage
	}
	act, err := bind(pos)
	if err != nil {
		return a.fail(err, cmd)
	}
	if len(a.g.seeds()) == 0 {
		return a.fail(usagef("--addr is empty"), cmd)
	}
	if a.g.timeout <= 0 {
		return a.fail(usagef("--timeout %v is not positive", a.g.timeout), cmd)
	}
	ctx, cancel := context.WithTimeout(ctx, a.g.timeout)
	defer cancel()
	c, err := client.Dial(ctx, a.g.seeds())
	if err != nil {
		return a.fail(err, cmd)
	}
	defer func() { _ = c.Close() }()
	return a.fail(act(ctx, c, &output{w: stdout, json: a.g.json}), cmd)
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

// fail prints err as one line on stderr and picks the exit code.
func (a *app) fail(err error, cmd command) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(a.stderr, "raftq: %s\n", message(err))
	code := exitCode(err)
	if code == exitUsage {
		fmt.Fprintf(a.stderr, "usage: raftq %s %s [flags] (see raftq %s --help)\n", cmd.path, cmd.args, cmd.path)
	}
	return code
}

// message prefers the server's own words ("queue \"x\" not found") over the
// client's call-site context, which only repeats the command line.
func message(err error) string {
	var e *client.Error
	if errors.As(err, &e) && e.Code != codes.Unavailable && e.Code != codes.DeadlineExceeded {
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
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
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
		fmt.Fprintf(tw, "  %s %s\t%s\n", c.path, c.args, c.summary)
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

func commandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: raftq %s %s [flags]\n\n%s\n\nflags:\n", c.path, c.args, c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
