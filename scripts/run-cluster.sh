#!/usr/bin/env bash
# Starts a 3-node raftq cluster on loopback in the foreground. Ctrl-C (or
# SIGTERM) stops every node it started, gracefully; data stays under
# ./data so the next run restarts the same cluster.
#
#   node  gRPC (clients)   raft        gossip      metrics
#   n1    127.0.0.1:7101   :7201       :7301       http://127.0.0.1:7401/metrics
#   n2    127.0.0.1:7102   :7202       :7302       :7402
#   n3    127.0.0.1:7103   :7203       :7303       :7403
#
# RAFTQ_NODE_ARGS adds flags to every node (e.g. "--shards 8"; shard count
# and other bootstrap settings only count on a fresh data directory).
set -euo pipefail
BIN=${BIN:-bin}
DATA=${DATA:-data}
mkdir -p "$DATA"
pids=()
stop() {
	trap - INT TERM
	echo "raftq: stopping nodes ${pids[*]}" >&2
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	exit 0
}
trap stop INT TERM
for i in 1 2 3; do
	"$BIN/raftq-node" \
		--node-id "n$i" --data-dir "$DATA/n$i" \
		--grpc-bind "127.0.0.1:710$i" --raft-bind "127.0.0.1:720$i" \
		--gossip-bind "127.0.0.1:730$i" --http-bind "127.0.0.1:740$i" \
		--join "127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303" \
		--bootstrap-expect 3 ${RAFTQ_NODE_ARGS:-} > >(sed -u "s/^/[n$i] /") 2>&1 &
	pids+=($!)
done
echo "raftq: 3 nodes starting; clients use 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 (Ctrl-C stops)" >&2
wait
