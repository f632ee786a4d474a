package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/raftq/raftq/raftstore"
)

// Exit codes of `raftq-node verify`.
const (
	verifyIntact  = 0
	verifyDamaged = 1
	// verifyNotRun: a usage error, a directory that is not a node's data
	// directory, or a node running on it; nothing was judged.
	verifyNotRun = 2
)

// runVerify is `raftq-node verify --data-dir DIR [--json]`: the offline
// check of a stopped node's data directory (raftstore.Verify). It reads
// and never writes.
func runVerify(args []string) int {
	return verifyMain(args, os.Getenv, os.Stdout, os.Stderr)
}

func verifyMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("raftq-node verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// RAFTQ_DATA_DIR as for the node itself, so `verify` in the image (where
	// it is /data) needs no flag.
	dataDir := fs.String("data-dir", getenv("RAFTQ_DATA_DIR"), "the data directory of a stopped node (required; env RAFTQ_DATA_DIR)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: raftq-node verify [--data-dir DIR] [--json]\n\n"+
			"Checks a stopped node's identity, raft logs, stable stores, facts and snapshots\n"+
			"without changing any file, and prints one line per replica: OK, or each problem\n"+
			"with its file, index and what to do. Exits 0 when everything is intact, 1 when\n"+
			"anything is damaged, 2 when it could not check (usage, not a data directory,\n"+
			"or the node is running).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return verifyIntact
		}
		return verifyNotRun
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "verify: unexpected argument %q\n", fs.Arg(0))
		return verifyNotRun
	}
	if *dataDir == "" {
		fmt.Fprintln(stderr, "verify: --data-dir (or RAFTQ_DATA_DIR) is required")
		fs.Usage()
		return verifyNotRun
	}
	rep, err := raftstore.Verify(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "verify %s: %v\n", *dataDir, err)
		return verifyNotRun
	}
	if *asJSON {
		out := struct {
			*raftstore.Report
			Damaged bool `json:"damaged"`
		}{rep, rep.Damaged()}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "verify: %v\n", err)
			return verifyNotRun
		}
	} else {
		printVerify(stdout, rep)
	}
	if rep.Damaged() {
		return verifyDamaged
	}
	return verifyIntact
}

// printVerify writes one line per replica that is intact and one per
// problem found, each with what to do.
func printVerify(w io.Writer, rep *raftstore.Report) {
	node := rep.NodeID
	if node == "" {
		node = "(unknown: no readable node.json)"
	}
	fmt.Fprintf(w, "node %s, data directory %s\n", node, rep.Dir)
	advice := raftstore.RepairAdvice
	if rep.NodeID != "" {
		advice = strings.ReplaceAll(advice, "NODE", rep.NodeID)
	}
	for _, d := range rep.Node {
		fmt.Fprintf(w, "node: DAMAGED %s\n", problemLine(d, advice))
	}
	damaged := 0
	for _, g := range rep.Groups {
		if len(g.Problems) == 0 {
			fmt.Fprintf(w, "%s: OK: %s\n", g.Group, summary(g))
			continue
		}
		damaged++
		for _, d := range g.Problems {
			fmt.Fprintf(w, "%s: DAMAGED %s\n", g.Group, problemLine(d, advice))
		}
	}
	for _, dir := range rep.NotChecked {
		fmt.Fprintf(w, "not checked (holds no replica): %s\n", dir)
	}
	switch {
	case damaged > 0 || len(rep.Node) > 0:
		fmt.Fprintf(w, "%d of %d replicas damaged", damaged, len(rep.Groups))
		if len(rep.Node) > 0 {
			fmt.Fprintf(w, "; the node's identity is damaged")
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "all %d replicas intact\n", len(rep.Groups))
	}
}

func problemLine(d *raftstore.DamageError, advice string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", d.Reason, d.Detail)
	if d.File != "" {
		fmt.Fprintf(&b, "; file %s", d.File)
	}
	if d.Index > 0 {
		fmt.Fprintf(&b, "; index %d", d.Index)
	}
	fmt.Fprintf(&b, "; to do: %s", advice)
	return b.String()
}

func summary(g *raftstore.GroupReport) string {
	if g.Note != "" {
		return g.Note
	}
	log := "log empty"
	if g.LastIndex > 0 {
		log = fmt.Sprintf("log %d-%d", g.FirstIndex, g.LastIndex)
	}
	snaps := "no snapshots"
	switch {
	case g.Snapshots == 1:
		snaps = fmt.Sprintf("1 snapshot at index %d", g.SnapshotIndex)
	case g.Snapshots > 1:
		snaps = fmt.Sprintf("%d snapshots, the newest at index %d", g.Snapshots, g.SnapshotIndex)
	}
	return fmt.Sprintf("%s (%s), term %d, durable to index %d in term %d, %s",
		log, g.LogStore, g.Term, g.FactsIndex, g.FactsTerm, snaps)
}
