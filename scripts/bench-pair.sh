#!/usr/bin/env bash
# bench-pair.sh: the headline `raftq-bench steady` run on two builds, side
# by side (docs/benchmarks.md, "A fair side-by-side"). Each run gets a
# fresh 3-node cluster (that build's own scripts/run-cluster.sh on a fresh
# data directory), one bench run, and a stop. Pairs alternate their order
# (A B, B A, A B, ...), because the second run of a pair tends to be the
# faster one on a machine that warms up.
#
#   scripts/bench-pair.sh OLD_TREE NEW_TREE [PAIRS]
#
# OLD_TREE and NEW_TREE are checkouts with `make build` done (bin/ and
# scripts/ are used). One line per run: build, processed/s, lost, CPU.
# Each build runs as its run-cluster.sh does: with TLS (RAFTQ_CA is set
# for the bench) where that script makes certificates, else plaintext;
# RAFTQ_INSECURE=1 makes a build with TLS run plaintext too.
# Uses the make-run ports (7101-7503): stop any make-run cluster first.
set -euo pipefail
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd) pairs=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
	local label=$1 tree=$2 d="$work/data"
	rm -rf "$d" && mkdir -p "$d"
	BIN="$tree/bin" DATA="$d" setsid "$tree/scripts/run-cluster.sh" >"$work/cluster.log" 2>&1 &
	local cpid=$! up=0 sec=()
	for _ in $(seq 1 60); do
		# A build whose run-cluster.sh runs TLS made its CA by now.
		if [ -f "$d/certs/ca.crt" ]; then
			sec=(RAFTQ_CA="$d/certs/ca.crt")
			[ -f "$d/certs/client-admin.crt" ] && sec+=(RAFTQ_CERT="$d/certs/client-admin.crt" RAFTQ_KEY="$d/certs/client-admin.key")
		else
			sec=(RAFTQ_INSECURE=1)
		fi
		if env "${sec[@]}" "$tree/bin/raftq" --addr 127.0.0.1:7101 cluster status >/dev/null 2>&1; then up=1; break; fi
		sleep 1
	done
	if [ "$up" = 1 ]; then
		sleep 3
		env "${sec[@]}" "$tree/bin/raftq-bench" steady --quiet --producers 16 --consumers 8 --size 1024 \
			--duration 20s --inflight 256 --batch 256 >"$work/bench.txt" 2>&1 || true
		echo "$label $(grep -E '^processed/s|^lost|cpu in window' "$work/bench.txt" | tr -s ' ' | tr '\n' ' ')"
	else
		echo "$label: the cluster did not answer within 60 s (see its log below)"
		tail -20 "$work/cluster.log"
	fi
	kill -TERM "$cpid" 2>/dev/null || true
	for _ in $(seq 1 30); do kill -0 "$cpid" 2>/dev/null || break; sleep 1; done
	for f in "$d"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
	sleep 2
}

for i in $(seq 1 "$pairs"); do
	if [ $((i % 2)) = 1 ]; then
		run "old-$i" "$old"; run "new-$i" "$new"
	else
		run "new-$i" "$new"; run "old-$i" "$old"
	fi
done
