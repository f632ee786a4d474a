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
# The nodes run --insecure: the bench measures the cluster's overload
# behaviour, not TLS (docs/benchmarks.md: security costs nothing
# measurable); the bench talks plaintext whatever CA make run left around.
export RAFTQ_INSECURE=1
MEMORY_BUDGET=${MEMORY_BUDGET:-2GiB}
SHARDS=${SHARDS:-1}
PORT_BASE=${PORT_BASE:-27300}
BIN=${BIN:-bin}
OUT=${OUT:-$(mktemp -d /tmp/raftq-overload.XXXXXX)}
READY_TIMEOUT=${READY_TIMEOUT:-120}
mkdir -p "$OUT"
if [ "${BUILD:-0}" = 1 ]; then
	CGO_ENABLED=0 go build -o "$BIN/raftq-node" ./cmd/node
	CGO_ENABLED=0 go build -o "$BIN/raftq" ./cmd/raftq
	CGO_ENABLED=0 go build -buildvcs=auto -o "$BIN/raftq-bench" ./cmd/bench
fi
for b in raftq-node raftq raftq-bench; do
	[ -x "$BIN/$b" ] || {
		echo "overload: $BIN/$b missing (make build, or BUILD=1)" >&2
		exit 2
	}
done

DATA=$(mktemp -d /tmp/raftq-overload-data.XXXXXX)
pids=()
bench=""
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
cleanup() {
	# The bench first: its drain would wait for nodes that are going.
	if [ -n "$bench" ]; then stop_pids 5 "$bench"; fi
	stop_pids 10 ${pids[@]+"${pids[@]}"}
	rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { echo $((PORT_BASE + $2 + $1)); } # port NODE OFFSET
pin() { # pin CPUS: the command prefix that runs on CPUS, or none
	if [ -n "$1" ]; then echo "taskset -c $1"; fi
}
join="127.0.0.1:$(port 1 200),127.0.0.1:$(port 2 200),127.0.0.1:$(port 3 200)"
addrs="127.0.0.1:$(port 1 0),127.0.0.1:$(port 2 0),127.0.0.1:$(port 3 0)"
metrics="http://127.0.0.1:$(port 1 300)/metrics,http://127.0.0.1:$(port 2 300)/metrics,http://127.0.0.1:$(port 3 300)/metrics"
for i in 1 2 3; do
	# shellcheck disable=SC2086 # RAFTQ_NODE_ARGS is a list of flags
	# shellcheck disable=SC2046 # pin's words are the prefix
	$(pin "${NODE_CPUS:-}") "$BIN/raftq-node" --insecure --node-id "n$i" --data-dir "$DATA/n$i" \
		--grpc-bind "127.0.0.1:$(port $i 0)" --raft-bind "127.0.0.1:$(port $i 100)" \
		--gossip-bind "127.0.0.1:$(port $i 200)" --http-bind "127.0.0.1:$(port $i 300)" \
		--peer-bind "127.0.0.1:$(port $i 400)" --join "$join" \
		--bootstrap-expect 3 --shards "$SHARDS" --wal-segment-size 4MiB \
		--memory-budget "$MEMORY_BUDGET" ${RAFTQ_NODE_ARGS:-} \
		>"$OUT/n$i.log" 2>&1 &
	pids+=($!)
done
cli() { "$BIN/raftq" --addr "$addrs" "$@"; }

start=$(date +%s)
until cli --timeout 5s cluster status >/dev/null 2>&1; do
	if [ $(($(date +%s) - start)) -ge "$READY_TIMEOUT" ]; then
		echo "overload: cluster not ready after ${READY_TIMEOUT}s (logs in $OUT)" >&2
		exit 2
	fi
	sleep 1 &
	wait $!
done
echo "overload: cluster ready after $(($(date +%s) - start)) s (pids ${pids[*]}); logs in $OUT" >&2

rc=0
# In the background, so INT or TERM is handled at once: the trap stops the
# bench, then the nodes.
# shellcheck disable=SC2046
$(pin "${BENCH_CPUS:-}") "$BIN/raftq-bench" overload --addr "$addrs" --metrics "$metrics" \
	--pids "$(
		IFS=,
		echo "${pids[*]}"
	)" "$@" > >(tee "$OUT/bench.out") &
bench=$!
wait "$bench" || rc=$?
bench=""
echo "overload: bench exit status $rc; output and node logs in $OUT" >&2
exit "$rc"
