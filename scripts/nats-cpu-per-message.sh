#!/usr/bin/env bash
# Runs the peer's headline workload (natsbench, ../shared/peers) against a
# NATS cluster already started with ../shared/peers/nats-cluster.sh, and
# prints the CPU it cost per processed message: the nats-server processes
# together, and the load generator. raftq-bench steady reports the same two
# figures for raftq in its "cpu in window" row, so the two compare as
# equals. Here the whole run counts (warmup included) over every message
# natsbench consumed.
#
#   scripts/nats-cpu-per-message.sh [duration, default 30s]
#
# NATSBENCH names the natsbench binary (default /tmp/raftq-peers/bin/natsbench).
set -euo pipefail
dur=${1:-30s}
bench=${NATSBENCH:-/tmp/raftq-peers/bin/natsbench}
[ -x "$bench" ] || { echo "natsbench not found at $bench; see ../shared/peers" >&2; exit 1; }
mapfile -t pids < <(pgrep -f 'nats-server -c' || true)
[ "${#pids[@]}" -gt 0 ] || { echo "no nats-server running; start ../shared/peers/nats-cluster.sh first" >&2; exit 1; }
ticks() { awk '{ i = index($0, ")"); split(substr($0, i + 2), f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
declare -A before
for p in "${pids[@]}"; do before[$p]=$(ticks "$p"); done
out=$(mktemp); trap 'rm -f "$out" "$out.time"' EXIT
/usr/bin/time -o "$out.time" -f "%U %S" "$bench" -P 16 -C 8 -size 1024 -warmup 3s -duration "$dur" \
	-pub async -window 256 -ack plain -batch 256 -durability default -out "$out" >/dev/null
server=0
for p in "${pids[@]}"; do server=$((server + $(ticks "$p") - ${before[$p]})); done
read -r user sys < "$out.time"
python3 - "$out" "$server" "$user" "$sys" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
msgs = d["consumed_unique"]
server = int(sys.argv[2]) / 100  # USER_HZ ticks
client = float(sys.argv[3]) + float(sys.argv[4])
print("nats processed %.0f/s, verified %s; servers %.1f s (%.1f us/msg), client %.1f s (%.1f us/msg) over %d messages"
      % (d["processed_msgs_per_s"], d["verified"], server, server / msgs * 1e6, client, client / msgs * 1e6, msgs))
PY
