#!/usr/bin/env bash
# One cluster, one headline run, and what every node did in it: the tool
# behind the comparisons under "Scale model" in docs/benchmarks.md. Where
# scripts/scale-model.sh grows one cluster through three stages and judges
# the bar, this starts a single shape (bootstrapped, or grown once), so two
# shapes or two builds can be put side by side.
#
#   scripts/shard-compare.sh NODES SHARDS [CAP]
#   GROW_FROM=3 scripts/shard-compare.sh 6 2 0.12   # 3 nodes / 1 shard grown to 6 / 2
#
# CAP (cores per node, e.g. 0.12) runs each node in its own cgroup v1 cpu
# cgroup with a PERIOD_US (default 10000) period; without it the nodes are
# uncapped. Output in OUT (default /tmp/shard-compare-NODES-SHARDS-CAP):
# the bench JSON, node logs, /metrics of every node before and after the
# run (metrics.before.nI, metrics.after.nI), deltas.txt (request counts by
# method and proposer rounds and commands, per node) and, with PROFILE=1,
# a 20 s CPU profile of every node taken in the middle of the run
# (profile.nI). Prints one JSON line: processed/s and server CPU per
# message. Environment: DURATION (default 40 s), BIN (default bin),
# PORT_BASE (default 29100: node i uses PORT_BASE+i for gRPC, +100 raft,
# +200 gossip, +300 HTTP, +400 peer, +500 profiles), INFLIGHT (default 256), NODE_ARGS,
# BENCH_ARGS. Needs root for CAP, jq and curl. Stops what it starts.
set -euo pipefail
# The nodes run --insecure (a measurement of raft, not of TLS); the CLI and
# the bench below talk plaintext to them whatever CA make run left around.
export RAFTQ_INSECURE=1
[ $# -ge 2 ] || {
	echo "usage: $0 NODES SHARDS [CAP]" >&2
	exit 2
}
N=$1 S=$2 CAP=${3:-}
DURATION=${DURATION:-40}
BIN=${BIN:-bin}
PERIOD_US=${PERIOD_US:-10000}
PORT_BASE=${PORT_BASE:-29100}
N0=${GROW_FROM:-$N}
OUT=${OUT:-/tmp/shard-compare-$N-$S-${CAP:-uncapped}}
rm -rf "$OUT"
mkdir -p "$OUT"
port() { echo $((PORT_BASE + $2 + $1)); } # port NODE OFFSET
DATA=$(mktemp -d /tmp/shard-compare-data.XXXXXX)
CG=""
if [ -n "$CAP" ]; then
	CG=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)/shard-compare-$$
	mkdir "$CG"
fi
pids=()
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
cleanup() {
	stop_pids 10 ${pids[@]+"${pids[@]}"}
	rm_cgroups ${CG:+"$CG"/n* "$CG"}
	rm -rf "$DATA"
}
trap cleanup EXIT
seeds="127.0.0.1:$(port 1 200),127.0.0.1:$(port 2 200),127.0.0.1:$(port 3 200)"
start() { # start I ARGS...
	local i=$1 cg=""
	shift
	if [ -n "$CAP" ]; then
		cg=$CG/n$i
		mkdir "$cg"
		echo "$PERIOD_US" >"$cg/cpu.cfs_period_us"
		awk -v c="$CAP" -v p="$PERIOD_US" 'BEGIN { printf "%d\n", c * p }' >"$cg/cpu.cfs_quota_us"
	fi
	# shellcheck disable=SC2016,SC2086 # $$ and $0 are the wrapper's; NODE_ARGS is a list
	bash -c '[ -z "$0" ] || echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" \
		"$BIN/raftq-node" --insecure --node-id "n$i" --data-dir "$DATA/n$i" --cluster-name "shard-compare-$$" \
		--grpc-bind "127.0.0.1:$(port "$i" 0)" --raft-bind "127.0.0.1:$(port "$i" 100)" \
		--gossip-bind "127.0.0.1:$(port "$i" 200)" --http-bind "127.0.0.1:$(port "$i" 300)" \
		--peer-bind "127.0.0.1:$(port "$i" 400)" --pprof-bind "127.0.0.1:$(port "$i" 500)" \
		--join "$seeds" --wal-segment-size 4MiB \
		"$@" ${NODE_ARGS:-} >"$OUT/n$i.log" 2>&1 &
	pids+=($!)
}
addrs=$(for i in $(seq 1 "$N"); do printf '127.0.0.1:%s,' "$(port "$i" 0)"; done)
addrs=${addrs%,}
cli() { "$BIN/raftq" --addr "$addrs" --timeout 10s "$@"; }
until_ok() { # until_ok TRIES CMD...: every 2 s
	local n=$1
	shift
	for _ in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 2
	done
	echo "gave up waiting for: $*" >&2
	return 1
}
for i in $(seq 1 "$N0"); do start "$i" --shards "$(((N0 == N) ? S : 1))" --bootstrap-expect "$N0"; done
until_ok 60 cli cluster status
if [ "$N0" != "$N" ]; then
	for i in $(seq $((N0 + 1)) "$N"); do start "$i" --bootstrap-expect 0; done
	sleep 15
	until_ok 10 cli cluster shards set "$S"
	moved() {
		cli --json cluster shards | jq -e --argjson s "$S" \
			'.Count == $s and ([.Moves[]? | select(.Phase != "done" and .Phase != "forget")] | length) == 0'
	}
	until_ok 150 moved
fi
# Replicas and leaders spread: every shard led, no node leading more than its share.
spread() {
	cli --json cluster nodes | jq -e --argjson s "$S" --argjson n "$N" \
		'[.[] | .Leaders // [] | length] | add == $s and max <= (($s + $n - 1) / $n | floor)'
}
until_ok 60 spread
sleep 5
plist=$(
	IFS=,
	echo "${pids[*]}"
)
for i in $(seq 1 "$N"); do curl -sf "127.0.0.1:$(port "$i" 300)/metrics" >"$OUT/metrics.before.n$i"; done
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
"$BIN/raftq-bench" steady --producers 16 --consumers 8 --size 1024 --inflight "${INFLIGHT:-256}" --batch 256 \
	--duration "${DURATION}s" --quiet --json --addr "$addrs" --pids "$plist" ${BENCH_ARGS:-} \
	>"$OUT/bench.json" 2>"$OUT/bench.log" &
bench=$!
profs=()
if [ "${PROFILE:-0}" = 1 ]; then
	sleep $((DURATION / 3))
	for i in $(seq 1 "$N"); do
		curl -sf "127.0.0.1:$(port "$i" 500)/debug/pprof/profile?seconds=20" >"$OUT/profile.n$i" &
		profs+=($!)
	done
fi
wait "$bench"
for p in ${profs[@]+"${profs[@]}"}; do wait "$p"; done
for i in $(seq 1 "$N"); do curl -sf "127.0.0.1:$(port "$i" 300)/metrics" >"$OUT/metrics.after.n$i"; done
for i in $(seq 1 "$N"); do
	awk -v n="n$i" 'FNR == NR { if ($1 !~ /^#/) a[$1] = $2; next }
		$1 !~ /^#/ && ($1 ~ /^raftq_request_duration_seconds_count/ || $1 ~ /^raftq_shard_proposer_(rounds|commands)_total/) {
			d = $2 - a[$1]; if (d != 0) print n, $1, d }' "$OUT/metrics.before.n$i" "$OUT/metrics.after.n$i"
done >"$OUT/deltas.txt"
jq -c '{processed_per_s: (.processed_per_s | floor), server_cpu_us_per_msg: (.cpu.server_cpu_us_per_msg | floor),
	enqueue_p50_ms, lost, leaders: .placement.leaders}' "$OUT/bench.json"
