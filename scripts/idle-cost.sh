#!/usr/bin/env bash
# Measures what an idle cluster costs: starts 3 raftq nodes on loopback
# with --shards SHARDS on fresh data directories in a temporary directory,
# waits until meta and every shard have a leader, creates a few queues and
# sends a few messages, lets the cluster idle for IDLE seconds, and reports
# per node: CPU as % of one core over the idle window (utime+stime from
# /proc/PID/stat, so other load on the machine does not count), goroutines,
# RSS and the disk its data directory uses (du: allocated blocks, so
# allocated log segment blocks count). Then it takes a CPU profile of n1 while
# the cluster still idles (after the window, so the profile costs nothing
# inside it) and stops every node it started, by pid.
#
#   SHARDS=128 IDLE=300 scripts/idle-cost.sh
#
# Environment: SHARDS (default 1), IDLE seconds (default 300), PROFILE
# seconds of n1's CPU profile (default 30, 0 skips it), PORT_BASE (default
# 27100: node i uses PORT_BASE+i for gRPC, +100 raft, +200 gossip, +300
# HTTP, +400 peer, +500 profiles), OUT directory for the report, profile
# and node logs (default: a new temporary directory, kept), BIN (default
# bin; `make build` first, or BUILD=1 to build), RAFTQ_NODE_ARGS added to
# every node.
# Linux only (/proc).
set -euo pipefail
NAME=idle-cost
SHARDS=${SHARDS:-1}
IDLE=${IDLE:-300}
PROFILE=${PROFILE:-30}
PORT_BASE=${PORT_BASE:-27100}
BIN=${BIN:-bin}
OUT=${OUT:-$(mktemp -d /tmp/raftq-idle.XXXXXX)}
READY_TIMEOUT=${READY_TIMEOUT:-300}
mkdir -p "$OUT"
# shellcheck source=scripts/lib/cluster.sh
. "$(dirname "$0")/lib/cluster.sh"
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
need_bins raftq-node raftq

DATA=$(mktemp -d /tmp/raftq-idle-data.XXXXXX)
pids=()
cleanup() {
	stop_pids 10 ${pids[@]+"${pids[@]}"}
	rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_nodes "" --shards "$SHARDS"
wait_ready
for q in idle-a idle-b idle-c; do
	cli queue create "$q" >/dev/null
	for m in 1 2 3; do cli send "$q" "message $m" >/dev/null; done
done

tck=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime+stime, after the ")" of comm (no spaces in raftq-node)
declare -a t0 l0
for i in 0 1 2; do
	t0[i]=$(ticks "${pids[i]}")
	l0[i]=$(wc -l <"$OUT/n$((i + 1)).log")
done
w0=$(date +%s.%N)
# In the background, so INT or TERM stops the nodes at once instead of
# after the sleep.
sleep "$IDLE" &
wait $!
w1=$(date +%s.%N)

report="$OUT/report.txt"
{
	echo "shards=$SHARDS idle=${IDLE}s node-args=${RAFTQ_NODE_ARGS:-} commit=$(git rev-parse --short HEAD 2>/dev/null || echo -)"
	# step-downs: raft leaders that lost their lease in the window (an
	# idle cluster should have none; a loaded machine makes them).
	printf '%-4s %10s %11s %9s %9s %11s\n' node "cpu%core" goroutines rss-MiB disk-MiB step-downs
	for i in 0 1 2; do
		n=$((i + 1))
		cpu=$(awk -v a="${t0[i]}" -v b="$(ticks "${pids[i]}")" -v t="$tck" -v w0="$w0" -v w1="$w1" \
			'BEGIN { printf "%.2f", (b - a) / t / (w1 - w0) * 100 }')
		gor=$(curl -fsS --max-time 10 "http://127.0.0.1:$(port $n 500)/debug/pprof/goroutine?debug=1" | awk 'NR==1 {print $4}')
		rss=$(awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/${pids[i]}/status")
		disk=$(du -sk "$DATA/n$n" | awk '{printf "%.0f", $1 / 1024}')
		downs=$(tail -n +"$((l0[i] + 1))" "$OUT/n$n.log" | grep -c "stepping down" || true)
		printf '%-4s %10s %11s %9s %9s %11s\n' "n$n" "$cpu" "$gor" "$rss" "$disk" "$downs"
	done
} | tee "$report"
if [ "$PROFILE" -gt 0 ]; then
	curl -fsS --max-time $((PROFILE + 30)) -o "$OUT/n1.cpu.prof" \
		"http://127.0.0.1:$(port 1 500)/debug/pprof/profile?seconds=$PROFILE"
	echo "idle-cost: n1 CPU profile: go tool pprof -top $BIN/raftq-node $OUT/n1.cpu.prof" >&2
fi
