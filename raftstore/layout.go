package raftstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A node's data directory, as cluster/node.go and cluster/shards.go lay it
// out:
//
//	node.json      the node's identity (node.go)
//	meta/          its replica of the raft group "meta"
//	shards/<id>/   its replica of the raft group "shard-<id>"
//
// Discard renames a damaged replica's directory to <dir>.damaged-<time>.
const (
	metaGroupName    = "meta"
	shardsDirName    = "shards"
	shardGroupPrefix = "shard-"
)

// groupDir is where group's replica lives in dataDir; false for a name
// that is not a raftq group.
func groupDir(dataDir, group string) (string, bool) {
	if group == metaGroupName {
		return filepath.Join(dataDir, metaGroupName), true
	}
	if id, ok := strings.CutPrefix(group, shardGroupPrefix); ok && canonicalID(id) {
		return filepath.Join(dataDir, shardsDirName, id), true
	}
	return "", false
}

func canonicalID(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && strconv.FormatUint(n, 10) == s
}

// groupDirs lists the replica directories in dataDir by group, and the
// directories beside them that are not replicas (moved aside by a repair,
// or unknown), which are left alone.
func groupDirs(dataDir string) (map[string]string, []string, error) {
	groups := map[string]string{}
	var other []string
	root, err := os.ReadDir(dataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", dataDir, err)
	}
	for _, e := range root {
		switch {
		case !e.IsDir():
		case e.Name() == metaGroupName:
			groups[metaGroupName] = filepath.Join(dataDir, metaGroupName)
		case e.Name() == shardsDirName:
		default:
			other = append(other, filepath.Join(dataDir, e.Name()))
		}
	}
	shards, err := os.ReadDir(filepath.Join(dataDir, shardsDirName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("list %s: %w", filepath.Join(dataDir, shardsDirName), err)
	}
	for _, e := range shards {
		path := filepath.Join(dataDir, shardsDirName, e.Name())
		if e.IsDir() && canonicalID(e.Name()) {
			groups[shardGroupPrefix+e.Name()] = path
		} else {
			other = append(other, path)
		}
	}
	return groups, other, nil
}

// groupOrder sorts meta first, then shards by number, then anything else
// by name.
func groupOrder(a, b string) int {
	ka, kb := groupKey(a), groupKey(b)
	switch {
	case ka.rank != kb.rank:
		return ka.rank - kb.rank
	case ka.n != kb.n:
		if ka.n < kb.n {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

type groupSortKey struct {
	rank int
	n    uint64
}

func groupKey(g string) groupSortKey {
	if g == metaGroupName {
		return groupSortKey{rank: 0}
	}
	if id, ok := strings.CutPrefix(g, shardGroupPrefix); ok && canonicalID(id) {
		n, _ := strconv.ParseUint(id, 10, 32)
		return groupSortKey{rank: 1, n: n}
	}
	return groupSortKey{rank: 2}
}
