#!/usr/bin/env bash
# Runs raftq-bench's topic workload (issue #35) on a fresh cluster of its
# own: starts 3 raftq nodes on loopback on fresh data directories in a
# temporary directory (the make-run layout: one shard, 4 MiB wal
# segments, fsync on; plaintext, which docs/benchmarks.md found to cost
# the same as TLS), waits until the cluster answers, runs `raftq-bench
# topic` against it with --pids, --metrics and --pprof set (node RSS from
# /proc, heap from the metrics after a GC forced through pprof), and stops
# every node it started, by pid, and removes the data directories. The
# bench's arguments are passed on:
#
#   scripts/topic-bench.sh --subs 4                        # 20 s of publishing to 4 subscriptions
#   scripts/topic-bench.sh --subs 1,4,16 --hold 100000     # memory per held message, one topic per count
#
# Environment: PORT_BASE (default 27700: node i uses PORT_BASE+i for
# gRPC, +100 raft, +200 gossip, +300 HTTP, +400 peer, +500 pprof); OUT, a
# directory for the node logs and the bench's output (default: a new
# temporary directory, kept); BIN (default bin; `make build` first);
# RAFTQ_NODE_ARGS added to every node; WORKLOAD (default topic; steady
# runs the headline's plain queue on the same layout, the reference for a
# topic of one subscription). The exit status is the bench's: 0
# every check passed, 1 a check failed (a copy lost), 2 the run could not
# be made. Linux only (/proc).
set -euo pipefail
NAME=topic-bench
PORT_BASE=${PORT_BASE:-27700}
BIN=${BIN:-bin}
OUT=${OUT:-$(mktemp -d /tmp/raftq-topic.XXXXXX)}
READY_TIMEOUT=${READY_TIMEOUT:-120}
mkdir -p "$OUT"
# shellcheck source=scripts/lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
need_bins raftq-node raftq raftq-bench

DATA=$(mktemp -d /tmp/raftq-topic-data.XXXXXX)
pids=()
bench=""
cleanup() {
	# The bench first: its drain would wait for nodes that are going.
	if [ -n "$bench" ]; then stop_pids 5 "$bench"; fi
	stop_pids 10 ${pids[@]+"${pids[@]}"}
	rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_nodes "" --wal-segment-size 4MiB
wait_ready

# --pprof only means something with --hold; pass it then.
extra=()
for a in "$@"; do
	case "$a" in --hold | --hold=*) extra=(--pprof "$pprof") ;; esac
done
rc=0
# In the background, so INT or TERM is handled at once: the trap stops the
# bench, then the nodes.
"$BIN/raftq-bench" "${WORKLOAD:-topic}" --addr "$addrs" --metrics "$metrics" \
	--pids "$(node_pids)" ${extra[@]+"${extra[@]}"} "$@" > >(tee "$OUT/bench.out") &
bench=$!
wait "$bench" || rc=$?
bench=""
echo "topic-bench: bench exit status $rc; output and node logs in $OUT" >&2
exit "$rc"
