#!/usr/bin/env bash
# sync-compare.sh: synchronous producers (each waits for every send's
# acknowledgement) on raftq beside NATS JetStream R3, interleaved on this
# machine (docs/benchmarks.md, "Synchronous producers"). For each producer
# count and round: a fresh 3-node raftq cluster (this tree's bin/ and
# scripts/run-cluster.sh, TLS as make run), `raftq-bench steady
# --inflight 1`, stop; then a fresh NATS cluster
# (../shared/peers/nats-cluster.sh), `natsbench -pub sync`, stop. Both with
# 8 consumers taking batches of 256 and 1 KiB bodies. One line per run.
#
#   make build && scripts/sync-compare.sh [PRODUCERS...]    # default: 16 1
#
# ROUNDS (default 2), DURATION (default 15s), NATS_MODE (default: NATS's
# own durability; always: fsync every write), PEERS (the peers directory,
# default ../shared/peers), NATSBENCH (default /tmp/raftq-peers/bin/natsbench).
# Uses the make-run ports (7101-7503) and NATS's (4222-4224, 6222-6224,
# 8222-8224): stop any make-run cluster first.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/stop.sh"
rounds=${ROUNDS:-2} dur=${DURATION:-15s} mode=${NATS_MODE:-default}
peers=$(cd "${PEERS:-$here/../shared/peers}" && pwd)
natsbench=${NATSBENCH:-/tmp/raftq-peers/bin/natsbench}
[ -x "$natsbench" ] || { echo "natsbench not found at $natsbench; see $peers/README.md" >&2; exit 1; }
producers=("$@")
[ ${#producers[@]} -gt 0 ] || producers=(16 1)
work=$(mktemp -d)
cpid=""
cleanup() {
	[ -z "$cpid" ] || stop_pids 30 "$cpid"
	for f in "$work"/data/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
	"$peers/nats-cluster.sh" stop >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

raftq_run() {
	local p=$1 d="$work/data" up=0
	rm -rf "$d" && mkdir -p "$d"
	BIN="$here/bin" DATA="$d" setsid "$here/scripts/run-cluster.sh" >"$work/cluster.log" 2>&1 &
	cpid=$!
	for _ in $(seq 1 60); do
		if [ -f "$d/certs/client-admin.key" ] && RAFTQ_CA="$d/certs/ca.crt" RAFTQ_CERT="$d/certs/client-admin.crt" \
			RAFTQ_KEY="$d/certs/client-admin.key" "$here/bin/raftq" --addr 127.0.0.1:7101 cluster status >/dev/null 2>&1; then
			up=1
			break
		fi
		sleep 1
	done
	if [ "$up" = 1 ]; then
		sleep 3
		RAFTQ_CA="$d/certs/ca.crt" RAFTQ_CERT="$d/certs/client-admin.crt" RAFTQ_KEY="$d/certs/client-admin.key" \
			"$here/bin/raftq-bench" steady --quiet --producers "$p" --inflight 1 --consumers 8 --batch 256 --size 1024 \
			--duration "$dur" >"$work/bench.txt" 2>&1 || true
		echo "raftq P=$p $(grep -E '^processed/s|^enqueue latency|^lost|^cpu in window' "$work/bench.txt" | tr -s ' ' | tr '\n' ' ')"
	else
		echo "raftq P=$p: the cluster did not answer within 60 s"
		tail -20 "$work/cluster.log"
	fi
	stop_pids 30 "$cpid"
	cpid=""
	for f in "$d"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
	sleep 2
}

nats_run() {
	local p=$1 out="$work/nats.json"
	rm -f "$out"
	"$peers/nats-cluster.sh" start "$mode" >/dev/null
	sleep 2
	local pids
	pids=$(cat "${RAFTQ_PEERS_DIR:-/tmp/raftq-peers}"/nats/n*.pid | paste -sd,)
	"$natsbench" -P "$p" -C 8 -size 1024 -warmup 3s -duration "$dur" -pub sync -ack plain -batch 256 \
		-durability "$mode" -pids "$pids" -out "$out" >"$work/nats.txt" 2>&1 || true
	if [ -s "$out" ]; then
		python3 - "$out" "$p" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
pub = d["publish_latency"]
rate = d["processed_msgs_per_s"]
pct = (d.get("cpu") or {}).get("server_cpu_pct_of_one_core", 0)
print("nats  P=%s processed/s %.0f publish p50 %.2f p99 %.2f ms verified %s servers %.0f%% of a core (%.0f us/msg)"
      % (sys.argv[2], rate, pub["p50_ms"], pub["p99_ms"], d["verified"], pct, pct / 100 / max(rate, 1) * 1e6))
PY
	else
		echo "nats  P=$p: no result"
		tail -5 "$work/nats.txt"
	fi
	"$peers/nats-cluster.sh" stop >/dev/null
	sleep 2
}

echo "sync-compare: $(git -C "$here" rev-parse --short HEAD), $dur per run, NATS durability $mode, $(date -u +%FT%TZ)"
for p in "${producers[@]}"; do
	for r in $(seq 1 "$rounds"); do
		if [ $((r % 2)) = 1 ]; then
			raftq_run "$p"
			nats_run "$p"
		else
			nats_run "$p"
			raftq_run "$p"
		fi
	done
done
