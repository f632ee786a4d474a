#!/usr/bin/env bash
# Starts raftq nodes on loopback in the foreground: all three by default
# (make run), or the ones named (scripts/run-cluster.sh n2) to start a node
# again after it stopped. Ctrl-C (or SIGTERM) stops the nodes this script
# started, gracefully; data stays under ./data so the next run restarts
# the same cluster. A node that exits on its own is reported with how to
# start it again; the others keep running.
#
#   node  gRPC (clients)   raft        gossip      metrics, console                peer (nodes)
#   n1    127.0.0.1:7101   :7201       :7301       http://127.0.0.1:7401/metrics   :7501
#   n2    127.0.0.1:7102   :7202       :7302       :7402                           :7502
#   n3    127.0.0.1:7103   :7203       :7303       :7403                           :7503
#
# Each node's pid is in $DATA/<node>.pid (kill -9 "$(cat data/n2.pid)"
# stops one abruptly, to watch failover).
#
# Raft log segments are 4 MiB here (the node's default is 64 MiB; the
# benchmark figures since 2026-11-24 use 4 MiB; a segment's blocks are
# allocated as it fills, so either costs an idle group about 1 MiB per
# node). RAFTQ_NODE_ARGS
# adds flags to every node and wins over these (e.g. "--shards 8"; shard
# count, segment size and other settings of a raft group only count when
# it is created, on a fresh data directory).
set -euo pipefail
# This script's own messages go to fd 3 (its stderr): while it waits for
# nodes, fd 2 is /dev/null, which keeps bash's job notices ("Killed ...")
# out of the log.
exec 3>&2
BIN=${BIN:-bin}
DATA=${DATA:-data}
mkdir -p "$DATA"

nodes=("$@")
if [ ${#nodes[@]} -eq 0 ]; then
	nodes=(n1 n2 n3)
fi
for n in "${nodes[@]}"; do
	case "$n" in
	n1 | n2 | n3) ;;
	*)
		echo "raftq: unknown node \"$n\" (want n1, n2 or n3)" >&3
		exit 2
		;;
	esac
done

pids=()
names=()
stopping=0

# describe turns an exit status into words.
describe() {
	if [ "$1" -gt 128 ]; then
		echo "killed by SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128)))"
	else
		echo "exit status $1"
	fi
}

stop() {
	trap - INT TERM
	stopping=1
	local up="" i
	for i in "${!pids[@]}"; do
		if [ -n "${pids[$i]}" ]; then up="$up${up:+ }${names[$i]}"; fi
	done
	echo "raftq: stopping ${up:-(none left)}" >&3
	for p in "${pids[@]}"; do
		if [ -n "$p" ]; then kill -TERM "$p" 2>/dev/null || true; fi
	done
	for i in "${!pids[@]}"; do
		p=${pids[$i]}
		[ -n "$p" ] || continue
		rc=0
		wait "$p" 2>/dev/null || rc=$?
		# 143 is the shell's way of saying the TERM it sent ended it.
		if [ "$rc" -ne 0 ] && [ "$rc" -ne 143 ] && [ "$rc" -ne 130 ]; then
			echo "raftq: ${names[$i]} had exited ($(describe "$rc"))" >&3
		fi
		rm -f "$DATA/${names[$i]}.pid"
	done
	# Let the prefixers print the nodes' last lines first (bounded: 5 s).
	for n in "${names[@]}"; do
		f="$DATA/.$n.log.pid"
		if [ -f "$f" ]; then
			p=$(cat "$f")
			for _ in $(seq 50); do
				kill -0 "$p" 2>/dev/null || break
				sleep 0.1
			done
			rm -f "$f"
		fi
	done
	echo "raftq: stopped" >&3
	exit 0
}
trap stop INT TERM

# TLS and gossip encryption are on unless RAFTQ_INSECURE=1: the first run
# makes a development CA, a gossip key and node certificates in
# $DATA/certs (raftq certs dev), later runs reuse them. The nodes take
# calls only from holders of a certificate (--client-auth require): the
# CLI and bench run from this directory present client-admin's and trust
# the CA on their own (elsewhere set RAFTQ_CA, RAFTQ_CERT, RAFTQ_KEY).
if [ "${RAFTQ_INSECURE:-0}" = 1 ]; then
	echo "raftq: RAFTQ_INSECURE=1: no TLS, no gossip encryption (see docs/security.md)" >&3
else
	"$BIN/raftq" certs dev --dir "$DATA/certs" --nodes n1,n2,n3 >&3
fi
security() {
	if [ "${RAFTQ_INSECURE:-0}" = 1 ]; then
		echo --insecure
	else
		echo --tls-ca "$DATA/certs/ca.crt" --tls-cert "$DATA/certs/$1.crt" --tls-key "$DATA/certs/$1.key" --gossip-key-file "$DATA/certs/gossip.key" --client-auth require
	fi
}

for n in "${nodes[@]}"; do
	i=${n#n}
	# security's output and RAFTQ_NODE_ARGS are lists of flags, split on
	# purpose.
	# shellcheck disable=SC2046,SC2086
	# The log prefixer ignores INT and TERM: it ends when the node closes
	# its output, so the node's last lines are printed even when a signal
	# reaches the whole process group.
	"$BIN/raftq-node" \
		--node-id "$n" --data-dir "$DATA/$n" \
		--grpc-bind "127.0.0.1:710$i" --raft-bind "127.0.0.1:720$i" \
		--gossip-bind "127.0.0.1:730$i" --http-bind "127.0.0.1:740$i" \
		--peer-bind "127.0.0.1:750$i" \
		--join "127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303" \
		--bootstrap-expect 3 --wal-segment-size 4MiB $(security "$n") ${RAFTQ_NODE_ARGS:-} \
		> >(trap '' INT TERM; exec sh -c 'echo $$ >"$0"; exec sed -u "$1"' "$DATA/.$n.log.pid" "s/^/[$n] /") 2>&1 3>&- &
	pids+=($!)
	names+=("$n")
	echo $! >"$DATA/$n.pid"
done
addrs=""
for n in "${nodes[@]}"; do addrs="$addrs${addrs:+,}127.0.0.1:710${n#n}"; done
echo "raftq: ${names[*]} starting (pids ${pids[*]}, also in $DATA/<node>.pid); clients use $addrs (Ctrl-C stops)" >&3

# The web console (docs/console.md) is on each node's HTTP port. With TLS
# the nodes require credentials, so the first run, once the cluster
# answers, makes an admin API key for it into $DATA/certs/console.token
# (owner-only; delete the file to get a new key at the next run). In the
# background, bounded by the wait, so Ctrl-C is handled at once.
console_key() {
	local tok="$DATA/certs/console.token" cli out
	cli=("$BIN/raftq" --addr "$addrs" --ca "$DATA/certs/ca.crt" --cert "$DATA/certs/client-admin.crt" --key "$DATA/certs/client-admin.key")
	if [ ! -s "$tok" ]; then
		"${cli[@]}" cluster status --wait 60s >/dev/null 2>&1 || {
			echo "raftq: console key not made: the cluster did not answer within 60 s (run scripts/run-cluster.sh again later)" >&3
			return
		}
		# A key named console left from an earlier run gets a new secret.
		out=$("${cli[@]}" keys create console --grant 'admin:*' 2>/dev/null || "${cli[@]}" keys rotate console 2>&1) || {
			echo "raftq: console key not made: $out" >&3
			return
		}
		out=$(printf '%s\n' "$out" | sed -n 's/^token (shown once; keep it secret): //p')
		if [ -z "$out" ]; then
			echo "raftq: console key not made: raftq keys printed no token" >&3
			return
		fi
		(umask 077 && printf '%s\n' "$out" >"$tok")
	fi
	echo "raftq: console at https://127.0.0.1:7401/console/ (also :7402, :7403; the browser warns about the development CA): log in with the API key in $tok" >&3
}
if [ "${RAFTQ_INSECURE:-0}" = 1 ]; then
	echo "raftq: console at http://127.0.0.1:7401/console/ (no login: --insecure)" >&3
else
	console_key 2>/dev/null &
fi

# Report a node that exits while the others run. Portable to bash 3.2
# (no wait -n): look every second; the sleep runs in the background so a
# signal is handled at once.
live=${#pids[@]}
while [ "$live" -gt 0 ]; do
	sleep 1 &
	wait $! 2>/dev/null || true
	for i in "${!pids[@]}"; do
		p=${pids[$i]}
		if [ -z "$p" ] || kill -0 "$p" 2>/dev/null; then continue; fi
		rc=0
		wait "$p" 2>/dev/null || rc=$?
		[ "$stopping" -eq 1 ] && continue
		echo "raftq: ${names[$i]} exited ($(describe "$rc")); the others keep running. Start it again with: scripts/run-cluster.sh ${names[$i]}" >&3
		rm -f "$DATA/${names[$i]}.pid"
		pids[$i]=""
		live=$((live - 1))
	done
done 2>/dev/null
echo "raftq: every node exited" >&3
