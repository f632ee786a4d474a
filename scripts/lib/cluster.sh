# shellcheck shell=bash
# Sourced by the scripts under scripts/ that run a 3-node loopback cluster
# of their own on fresh data directories (idle-cost.sh, overload.sh,
# topic-bench.sh): the binaries, the ports, the nodes and the wait for
# them. The caller sets NAME (its name in messages), PORT_BASE, BIN, OUT,
# DATA and READY_TIMEOUT, declares pids=() (the nodes' pids are appended
# to it) and stops them itself (lib/stop.sh). Node i uses PORT_BASE+i for
# gRPC, +100 raft, +200 gossip, +300 HTTP, +400 peer and +500 profiles.
# The nodes run --insecure: these scripts measure raft and the queue, not
# TLS (docs/benchmarks.md found it costs nothing measurable), and the CLI
# and bench talk plaintext to them whatever CA make run left around.
export RAFTQ_INSECURE=1

# need_bins BIN...: builds them into $BIN with BUILD=1, else exits 2 naming
# the first one missing.
need_bins() {
	local b
	if [ "${BUILD:-0}" = 1 ]; then
		for b in "$@"; do
			case "$b" in
			raftq-node) CGO_ENABLED=0 go build -buildvcs=auto -o "$BIN/$b" ./cmd/node ;;
			raftq) CGO_ENABLED=0 go build -buildvcs=auto -o "$BIN/$b" ./cmd/raftq ;;
			raftq-bench) CGO_ENABLED=0 go build -buildvcs=auto -o "$BIN/$b" ./cmd/bench ;;
			esac
		done
	fi
	for b in "$@"; do
		[ -x "$BIN/$b" ] || {
			echo "$NAME: $BIN/$b missing (make build, or BUILD=1)" >&2
			exit 2
		}
	done
}

port() { echo $((PORT_BASE + $2 + $1)); } # port NODE OFFSET

# each FORMAT OFFSET: the three nodes' FORMAT (a printf format of one %s,
# the address) at port OFFSET, comma-separated.
each() {
	local i out=""
	for i in 1 2 3; do
		# shellcheck disable=SC2059 # the format is the argument
		out="$out${out:+,}$(printf "$1" "127.0.0.1:$(port "$i" "$2")")"
	done
	echo "$out"
}

# The callers' lists: gRPC addresses, metrics URLs and profile URLs.
# shellcheck disable=SC2034 # used by the scripts that source this
addrs=$(each %s 0) metrics=$(each http://%s/metrics 300) pprof=$(each http://%s 500)

# start_nodes PREFIX FLAG...: starts n1..n3 under PREFIX (a command prefix
# such as "taskset -c 0", or "" for none) with the given flags after the
# common ones and before RAFTQ_NODE_ARGS; logs go to $OUT/nI.log.
start_nodes() {
	local prefix=$1 i
	shift
	for i in 1 2 3; do
		# shellcheck disable=SC2086 # PREFIX and RAFTQ_NODE_ARGS are lists of words
		$prefix "$BIN/raftq-node" --insecure --node-id "n$i" --data-dir "$DATA/n$i" \
			--grpc-bind "127.0.0.1:$(port $i 0)" --raft-bind "127.0.0.1:$(port $i 100)" \
			--gossip-bind "127.0.0.1:$(port $i 200)" --http-bind "127.0.0.1:$(port $i 300)" \
			--peer-bind "127.0.0.1:$(port $i 400)" --pprof-bind "127.0.0.1:$(port $i 500)" \
			--join "$(each %s 200)" --bootstrap-expect 3 "$@" ${RAFTQ_NODE_ARGS:-} \
			>"$OUT/n$i.log" 2>&1 &
		pids+=($!)
	done
}

cli() { "$BIN/raftq" --addr "$addrs" "$@"; }

# wait_ready: until the cluster answers `cluster status` (meta and every
# shard led); exits 2 when a node exits first (a port taken, say) or
# after READY_TIMEOUT seconds. Prints how long it took.
wait_ready() {
	local start i
	start=$(date +%s)
	until cli --timeout 5s cluster status >/dev/null 2>&1; do
		for i in 1 2 3; do
			if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
				echo "$NAME: n$i exited before the cluster was ready: $(tail -1 "$OUT/n$i.log")" >&2
				exit 2
			fi
		done
		if [ $(($(date +%s) - start)) -ge "$READY_TIMEOUT" ]; then
			echo "$NAME: cluster not ready after ${READY_TIMEOUT}s (logs in $OUT)" >&2
			exit 2
		fi
		# In the background, so INT or TERM is handled at once.
		sleep 1 &
		wait $!
	done
	echo "$NAME: cluster ready after $(($(date +%s) - start)) s (pids ${pids[*]}); logs in $OUT" >&2
}

# node_pids: the nodes' pids, comma-separated (raftq-bench --pids).
node_pids() {
	local IFS=,
	echo "${pids[*]}"
}
