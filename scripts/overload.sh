#!/usr/bin/env bash
# Runs raftq-bench's overload workload (issue #32) on a fresh cluster of
# its own: starts 3 raftq nodes on loopback on fresh data directories in a
# temporary directory, waits until meta and every shard have a leader,
# runs `raftq-bench overload` against them with --pids and --metrics set
# (node RSS from /proc, memory budgets from the nodes' metrics), and stops
# every node it started, by pid. The bench's arguments are passed on:
#
#   scripts/overload.sh                                   # the whole workload, about a minute
#   scripts/overload.sh --ceiling 20000 --phase-duration 5s --json
#   MEMORY_BUDGET=2GiB scripts/overload.sh --a-send-rate 2000
#
# Environment: MEMORY_BUDGET, each node's --memory-budget (default 2GiB:
# a budget the flood could reach, not the machine's RAM); SHARDS (default
# 1); PORT_BASE (default 27300: node i uses PORT_BASE+i for gRPC, +100
# raft, +200 gossip, +300 HTTP, +400 peer); OUT, a directory for the
# node logs and the bench's output (default: a new temporary directory,
# kept); BIN (default bin; `make build` first, or BUILD=1 to build);
# RAFTQ_NODE_ARGS added to every node; NODE_CPUS and BENCH_CPUS, CPU lists
# (taskset -c) to pin the nodes and the bench to, so the flood's generator
# cannot take the nodes' CPU on a small machine (NODE_CPUS=0 BENCH_CPUS=1
# on 2 cores). The exit status is the bench's:
# 0 every bar met, 1 a bar missed, 2 the run could not be made.
# Linux only (/proc).
set -euo pipefail
NAME=overload
MEMORY_BUDGET=${MEMORY_BUDGET:-2GiB}
SHARDS=${SHARDS:-1}
PORT_BASE=${PORT_BASE:-27300}
BIN=${BIN:-bin}
OUT=${OUT:-$(mktemp -d /tmp/raftq-overload.XXXXXX)}
READY_TIMEOUT=${READY_TIMEOUT:-120}
mkdir -p "$OUT"
# shellcheck source=scripts/lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
need_bins raftq-node raftq raftq-bench

DATA=$(mktemp -d /tmp/raftq-overload-data.XXXXXX)
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

pin() { # pin CPUS: the command prefix that runs on CPUS, or none
	if [ -n "$1" ]; then echo "taskset -c $1"; fi
}
start_nodes "$(pin "${NODE_CPUS:-}")" --shards "$SHARDS" --wal-segment-size 4MiB --memory-budget "$MEMORY_BUDGET"
wait_ready

rc=0
# In the background, so INT or TERM is handled at once: the trap stops the
# bench, then the nodes.
# shellcheck disable=SC2046 # pin's words are the prefix
$(pin "${BENCH_CPUS:-}") "$BIN/raftq-bench" overload --addr "$addrs" --metrics "$metrics" \
	--pids "$(node_pids)" "$@" > >(tee "$OUT/bench.out") &
bench=$!
wait "$bench" || rc=$?
bench=""
echo "overload: bench exit status $rc; output and node logs in $OUT" >&2
exit "$rc"
