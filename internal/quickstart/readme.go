package quickstart

import (
	"bufio"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/raftq/raftq/wire"
)

// Step is one command of the quick start.
type Step struct {
	// Background: a command that keeps running (a ```sh block line).
	Background bool
	// Cmd is the command as written, for bash.
	Cmd string
	// Until is the text a background command's output shows once it is up,
	// quoted in the command's comment ('make run  # ... prints "raftq: n1
	// n2 n3 starting"'); empty: nothing to wait for.
	Until string
	// Want is what a transcript command prints, one line per entry.
	Want []string
}

var quoted = regexp.MustCompile(`#.*"([^"]+)"`)

// Parse returns the steps of the section of readme whose heading starts
// with heading ("## Quick start"), up to the next heading of that level.
func Parse(readme, heading string) ([]Step, error) {
	level := heading[:strings.IndexByte(heading, ' ')+1]
	var (
		steps   []Step
		in      bool
		block   string // "" outside a fence, else its info string
		current *Step
	)
	sc := bufio.NewScanner(strings.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		if block == "" && strings.HasPrefix(line, level) {
			if in {
				break
			}
			in = strings.HasPrefix(line, heading)
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "```") {
			if block != "" {
				block, current = "", nil
				continue
			}
			block = strings.TrimSpace(strings.TrimPrefix(line, "```"))
			if block != "sh" && block != "console" {
				return nil, fmt.Errorf("quick start: a ```%s block; only sh (commands that keep running) and console (transcripts) are walked", block)
			}
			continue
		}
		switch block {
		case "sh":
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				s := Step{Background: true, Cmd: t}
				if m := quoted.FindStringSubmatch(t); m != nil {
					s.Until = m[1]
				}
				steps = append(steps, s)
			}
		case "console":
			if cmd, ok := strings.CutPrefix(line, "$ "); ok {
				steps = append(steps, Step{Cmd: cmd})
				current = &steps[len(steps)-1]
				continue
			}
			if current == nil {
				return nil, fmt.Errorf("quick start: console output %q before any command", line)
			}
			current.Want = append(current.Want, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no %q section with commands", heading)
	}
	return steps, nil
}

// Volatile are the table columns (and FIELD/VALUE rows, lower case) whose
// values differ from run to run, with the shape each must have.
var Volatile = map[string]func(string) bool{
	"ID": isMessageID, "RECEIPT": isReceipt, "LEADER": isNode, "ADDR": isAddr,
	"TERM": isUint, "COMMIT": isUint, "APPLIED": isUint, "REPLICAS": isNodeList,
	"OLDEST-READY": isDuration, "CREATED": isTime, "created": isTime,
	// Recorded by the meta leader shortly after it is elected: "-" until then.
	"LOG-FORMAT": func(s string) bool { return s == "-" || isUint(s) },
}

func isMessageID(s string) bool { _, err := wire.ParseMessageID(s); return err == nil }
func isReceipt(s string) bool   { _, err := wire.ParseReceipt(s); return err == nil }
func isUint(s string) bool      { _, err := strconv.ParseUint(s, 10, 64); return err == nil }
func isDuration(s string) bool  { _, err := time.ParseDuration(s); return err == nil }
func isTime(s string) bool      { _, err := time.Parse(time.RFC3339, s); return err == nil }

var (
	nodeRE = regexp.MustCompile(`^n[0-9]+$`)
	addrRE = regexp.MustCompile(`^127\.0\.0\.1:[0-9]+$`)
)

func isNode(s string) bool { return nodeRE.MatchString(s) }
func isAddr(s string) bool { return addrRE.MatchString(s) }
func isNodeList(s string) bool {
	for _, n := range strings.Split(s, ",") {
		if !isNode(n) {
			return false
		}
	}
	return true
}

// isHeader reports whether fields are a table header: two or more words
// of capitals.
func isHeader(fields []string) bool {
	if len(fields) < 2 {
		return false
	}
	for _, f := range fields {
		if strings.ToUpper(f) != f || strings.ContainsAny(f, "0123456789.:") {
			return false
		}
	}
	return true
}

// Compare checks got (a command's output) against want line by line and
// records in vars each volatile value of want that got printed
// differently (want's value -> got's).
func Compare(want []string, got string, vars map[string]string) error {
	gotLines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if got == "" {
		gotLines = nil
	}
	want = trimBlank(want)
	if len(gotLines) != len(want) {
		return fmt.Errorf("%d lines printed, the README shows %d", len(gotLines), len(want))
	}
	var header []string
	for i, w := range want {
		g := strings.TrimRight(gotLines[i], " ")
		wf, gf := strings.Fields(w), strings.Fields(g)
		switch {
		case len(wf) == 0:
			header = nil
		case isHeader(wf):
			header = wf
		}
		if strings.TrimRight(w, " ") == g {
			continue
		}
		if err := compareFields(header, wf, gf, vars); err != nil {
			return fmt.Errorf("line %d: %w\n  README: %s\n  got:    %s", i+1, err, w, g)
		}
	}
	return nil
}

// compareFields compares one line field by field. In a table row the last
// column takes the rest of the line (a body may have spaces).
func compareFields(header, wf, gf []string, vars map[string]string) error {
	if header != nil && !isHeader(wf) {
		wf, gf = fold(wf, len(header)), fold(gf, len(header))
	}
	if len(wf) != len(gf) {
		return fmt.Errorf("%d fields, the README shows %d", len(gf), len(wf))
	}
	for j := range wf {
		if wf[j] == gf[j] {
			continue
		}
		shape := volatile(header, wf, j)
		if shape == nil || !shape(wf[j]) || !shape(gf[j]) {
			return fmt.Errorf("%q where the README shows %q", gf[j], wf[j])
		}
		vars[wf[j]] = gf[j]
	}
	return nil
}

// volatile is the shape field j of a line must have if it may differ from
// the README, or nil.
func volatile(header, fields []string, j int) func(string) bool {
	switch {
	case header == nil:
		// Free text ("node n1, meta leader n3", a sent message's id):
		// node names and message ids.
		return func(s string) bool { return isNode(strings.TrimSuffix(s, ",")) || isMessageID(s) }
	case len(header) == 2 && header[0] == "FIELD" && j == 1:
		return Volatile[fields[0]]
	case j < len(header):
		return Volatile[header[j]]
	}
	return nil
}

// fold joins the fields past n-1 into one, so a row has at most n.
func fold(fields []string, n int) []string {
	if len(fields) <= n {
		return fields
	}
	return append(fields[:n-1:n-1], strings.Join(fields[n-1:], " "))
}

func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Substitute replaces, as whole words, the README's values that this run
// printed differently.
func Substitute(cmd string, vars map[string]string) string {
	words := strings.Split(cmd, " ")
	for i, w := range words {
		if v, ok := vars[w]; ok {
			words[i] = v
		}
	}
	return strings.Join(words, " ")
}
