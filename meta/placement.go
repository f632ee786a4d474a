package meta

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strconv"
)

// Place assigns replication replicas to each of count shards by rendezvous
// (highest-random-weight) hashing over nodes: each shard ranks every node by
// hash(shard, node) and takes the top ones, the first being the preferred
// leader. It is a pure function of its inputs, so any node computes the same
// map, and adding a node to the input moves only the shards it wins.
// replication is capped at len(nodes).
func Place(count uint32, replication int, nodes []string) map[uint32][]string {
	ids := slices.Clone(nodes)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if replication > len(ids) {
		replication = len(ids)
	}
	if replication < 1 {
		return map[uint32][]string{}
	}
	out := make(map[uint32][]string, count)
	type ranked struct {
		id    string
		score uint64
	}
	rank := make([]ranked, len(ids))
	for s := uint32(0); s < count; s++ {
		for i, id := range ids {
			rank[i] = ranked{id: id, score: rendezvousScore(s, id)}
		}
		slices.SortFunc(rank, func(a, b ranked) int {
			switch {
			case a.score > b.score:
				return -1
			case a.score < b.score:
				return 1
			}
			// Ties are astronomically rare; break them by id to stay total.
			if a.id < b.id {
				return -1
			}
			return 1
		})
		replicas := make([]string, replication)
		for i := range replicas {
			replicas[i] = rank[i].id
		}
		out[s] = replicas
	}
	return out
}

// rendezvousScore is a well-mixed 64-bit weight of (shard, node). sha256 is
// used for its mixing, not for security: FNV-style hashes of near-identical
// strings such as "node-1"/"node-2" rank badly.
func rendezvousScore(shard uint32, node string) uint64 {
	b := make([]byte, 0, 16+len(node))
	b = strconv.AppendUint(b, uint64(shard), 10)
	b = append(b, 0)
	b = append(b, node...)
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}
