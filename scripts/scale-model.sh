#!/usr/bin/env bash
# The scale model of issue #29 (docs/benchmarks.md, "Scale model"): every
# node capped at the same CPU share by a cgroup, the headline workload on
# 3 nodes (1 shard), then on 6 nodes (2 shards) and 9 nodes (3 shards),
# each grown online from the one before: nodes added with --join
# --bootstrap-expect 0, `raftq cluster shards set N`, and a wait until
# every slot move is done and the rebalancer has spread replicas and
# leaders. processed/s should scale at least 0.8 x linearly; the report
# says whether it did (a miss is reported, not a failure).
#
#   make build && sudo scripts/scale-model.sh           # or: make scale-model
#   STAGES=1 DURATION=15 scripts/scale-model.sh         # 3 nodes only, short
#
# Each node runs in its own cgroup, <cpu controller>/raftq-scale-<pid>/nI:
# cgroup v1 cpu.cfs_period_us=PERIOD_US, cpu.cfs_quota_us=CAP*PERIOD_US;
# cgroup v2 cpu.max "CAP*PERIOD_US PERIOD_US" (v1 when a v1 cpu controller
# is mounted, else v2). The node enters its cgroup before it execs, so it
# is capped from its first instruction. The load generator, raftq-bench,
# runs uncapped where this script runs; the report gives its CPU (from its
# own getrusage over the measured window) and the host's, so a reader can
# see whether it, rather than the capped nodes, was the limit.
#
# Environment: STAGES (1-3, default 3: stages 1..STAGES), REPEATS (1-9,
# default 1: headline runs per stage, the median judged), DURATION seconds
# measured per stage (default 60), CAP cores per node (default 0.12: nine
# nodes take 1.08 of this machine's two cores and leave the rest to the
# load generator), PERIOD_US (default 100000), CGROUP_PARENT (a cgroup
# directory to create raftq-scale-<pid> in; default the cpu controller's
# mount), PORT_BASE (default 28100: node i uses PORT_BASE+i for gRPC, +100
# raft, +200 gossip, +300 HTTP, +400 peer), OUT directory for the report,
# the bench JSON and node logs (default: a new temporary directory, kept),
# BIN (default bin; `make build` first), RAFTQ_NODE_ARGS added to every
# node, BENCH_ARGS added to the bench command (its flags win over the
# headline's), READY_TIMEOUT, JOIN_TIMEOUT and GROW_TIMEOUT seconds
# (defaults 120, 180 and 900), DATA_PARENT the directory the nodes' data
# directories go in (default /tmp; /dev/shm gives every node a disk of its
# own in effect, as separate machines would have, instead of one disk all
# of them fsync to), PER_SHARD_LOAD=1 runs the headline's 16 producers and 8
# consumers per shard instead of in all (a fixed client load splits its
# sends over more shards in smaller batches), POST_GROW_WAIT seconds to
# wait after a
# growth before measuring (default 0: measure at once, while the moved
# slots' dedup look-ups still run). Needs root (cgroups), jq and Linux.
# Stops every node it started, by pid, and removes its cgroups at exit.
set -euo pipefail
# The nodes run --insecure (a measurement of raft, not of TLS); the CLI and
# the bench below talk plaintext to them whatever CA make run left around.
export RAFTQ_INSECURE=1
STAGES=${STAGES:-3}
DURATION=${DURATION:-60}
REPEATS=${REPEATS:-1}
CAP=${CAP:-0.12}
PERIOD_US=${PERIOD_US:-100000}
PORT_BASE=${PORT_BASE:-28100}
BIN=${BIN:-bin}
READY_TIMEOUT=${READY_TIMEOUT:-120}
JOIN_TIMEOUT=${JOIN_TIMEOUT:-180}
GROW_TIMEOUT=${GROW_TIMEOUT:-900}
POST_GROW_WAIT=${POST_GROW_WAIT:-0}
say() { echo "scale-model: $*" >&2; }
die() {
	say "$*"
	exit 2
}

# The three looks of grown, on the cluster's --json answers (files), so
# `scale-model.sh selftest` can check them without a cluster.
# shards_done FILE SHARDS: the shard count is SHARDS, no slot move is left
# but done ones (kept while their dedup look-ups run; "forget" on their way
# out), and the slots are spread within one per shard.
shards_done() {
	jq -e --argjson s "$2" '.Count == $s
		and ([.Moves[]? | select(.Phase != "done" and .Phase != "forget")] | length) == 0
		and (.SlotsPerShard | length) == $s
		and ((.SlotsPerShard | max) - (.SlotsPerShard | min)) <= 1' "$1" >/dev/null
}
# nodes_spread FILE NODES SHARDS: NODES members, all alive, replicas within
# one of each other, every shard led once and no node leading more than
# its share (as the answering node sees the leaders).
nodes_spread() {
	jq -e --argjson n "$2" --argjson s "$3" '[.[] | select(.Retired | not)] as $m
		| ($m | length) == $n
		and all($m[]; .State == "alive")
		and ([$m[] | .Replicas // [] | length] | max - min) <= 1
		and ([$m[] | .Leaders // [] | length] | add == $s and max <= (($s + $n - 1) / $n | floor))' "$1" >/dev/null
}
# rebalance_idle FILE: the rebalancer's plan (--dry-run) is empty.
rebalance_idle() {
	jq -e '(.Moves // [] | length) == 0 and (.Leaders // [] | length) == 0 and (.Moving // "") == ""' "$1" >/dev/null
}

# selftest: the looks above on made-up answers, each expected to pass or
# fail; needs jq only (no root, no cluster).
selftest() {
	local d bad=0
	d=$(mktemp -d)
	# shellcheck disable=SC2064 # d is fixed now
	trap "rm -rf '$d'" RETURN
	expect() { # expect yes|no WHAT CMD...
		local want=$1 what=$2 got=no
		shift 2
		if "$@"; then got=yes; fi
		if [ "$got" != "$want" ]; then
			echo "selftest: $what: got $got, want $want" >&2
			bad=1
		fi
	}
	put() { printf '%s' "$2" >"$d/$1.json"; }
	put done2 '{"Previous":1,"Count":2,"Slots":256,"Moves":[{"ID":1,"From":0,"To":1,"Slots":128,"Phase":"done"}],"SlotsPerShard":[128,128]}'
	put none3 '{"Previous":3,"Count":3,"Slots":256,"Moves":null,"SlotsPerShard":[85,85,86]}'
	put route2 '{"Previous":1,"Count":2,"Slots":256,"Moves":[{"ID":1,"From":0,"To":1,"Slots":128,"Phase":"route"}],"SlotsPerShard":[128,128]}'
	put planned3 '{"Previous":2,"Count":3,"Slots":256,"Moves":[{"ID":2,"From":0,"To":2,"Slots":43,"Phase":"done"},{"ID":0,"From":1,"To":2,"Slots":42,"Phase":"planned"}],"SlotsPerShard":[85,86,85]}'
	put uneven2 '{"Previous":1,"Count":2,"Slots":256,"Moves":null,"SlotsPerShard":[256,0]}'
	put one '{"Previous":1,"Count":1,"Slots":0,"Moves":null,"SlotsPerShard":null}'
	put forget2 '{"Previous":1,"Count":2,"Slots":256,"Moves":[{"ID":1,"From":0,"To":1,"Slots":128,"Phase":"forget"}],"SlotsPerShard":[128,128]}'
	put seal2 '{"Previous":1,"Count":2,"Slots":256,"Moves":[{"ID":1,"From":0,"To":1,"Slots":128,"Phase":"seal"}],"SlotsPerShard":[256,0]}'
	expect yes "2 shards, moves done" shards_done "$d/done2.json" 2
	expect yes "3 shards, no moves listed" shards_done "$d/none3.json" 3
	expect yes "a move being forgotten" shards_done "$d/forget2.json" 2
	expect no "a move sealing" shards_done "$d/seal2.json" 2
	expect no "a move in route" shards_done "$d/route2.json" 2
	expect no "a planned move" shards_done "$d/planned3.json" 3
	expect no "slots not spread" shards_done "$d/uneven2.json" 2
	expect no "still 1 shard" shards_done "$d/one.json" 2
	expect no "3 shards wanted, 2 there" shards_done "$d/done2.json" 3
	n() { printf '{"NodeID":"n%s","State":"%s","Meta":"voter","Replicas":%s,"Leaders":%s,"Retired":false}' "$@"; }
	put spread6 "[$(n 1 alive '[0]' '[0]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive '[1]' '[1]'),$(n 5 alive '[1]' null),$(n 6 alive '[1]' null)]"
	put twolead6 "[$(n 1 alive '[0]' '[0,1]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive '[1]' null),$(n 5 alive '[1]' null),$(n 6 alive '[1]' null)]"
	put noleader6 "[$(n 1 alive '[0]' '[0]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive '[1]' null),$(n 5 alive '[1]' null),$(n 6 alive '[1]' null)]"
	put suspect6 "[$(n 1 alive '[0]' '[0]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive '[1]' '[1]'),$(n 5 suspect '[1]' null),$(n 6 alive '[1]' null)]"
	put crowded6 "[$(n 1 alive '[0,1]' '[0]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive '[1]' '[1]'),$(n 5 alive '[1]' null),$(n 6 alive null null)]"
	put joined6 "[$(n 1 alive '[0]' '[0]'),$(n 2 alive '[0]' null),$(n 3 alive '[0]' null),$(n 4 alive null null),$(n 5 alive null null),$(n 6 alive null null)]"
	expect yes "6 nodes, 2 shards spread" nodes_spread "$d/spread6.json" 6 2
	expect no "one node leads both" nodes_spread "$d/twolead6.json" 6 2
	expect no "a shard without a leader" nodes_spread "$d/noleader6.json" 6 2
	expect no "a suspect node" nodes_spread "$d/suspect6.json" 6 2
	expect no "replicas 2 and 0" nodes_spread "$d/crowded6.json" 6 2
	expect no "joined, nothing grown" nodes_spread "$d/joined6.json" 6 2
	expect no "9 nodes wanted, 6 there" nodes_spread "$d/spread6.json" 9 3
	put idle '{"Moves":null,"Leaders":null,"Nodes":[],"Started":false,"Moving":"","Automatic":true}'
	put moving '{"Moves":null,"Leaders":null,"Nodes":[],"Started":false,"Moving":"shard 1: n1 -> n4","Automatic":true}'
	put lead '{"Moves":null,"Leaders":[{"Shard":1,"From":"n1","To":"n4"}],"Nodes":[],"Started":false,"Moving":"","Automatic":true}'
	put moves '{"Moves":[{"Shard":1,"From":"n1","To":"n4"}],"Leaders":null,"Nodes":[],"Started":false,"Moving":"","Automatic":true}'
	expect yes "nothing to do" rebalance_idle "$d/idle.json"
	expect no "a move running" rebalance_idle "$d/moving.json"
	expect no "a leader change planned" rebalance_idle "$d/lead.json"
	expect no "a move planned" rebalance_idle "$d/moves.json"
	[ "$bad" = 0 ] && echo "selftest: ok"
	return "$bad"
}
if [ "${1:-}" = selftest ]; then
	selftest
	exit
fi
OUT=${OUT:-$(mktemp -d /tmp/raftq-scale.XXXXXX)}
mkdir -p "$OUT"

case "$STAGES" in 1 | 2 | 3) ;; *) die "STAGES=$STAGES: want 1, 2 or 3" ;; esac
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || die "DURATION=$DURATION: want whole seconds"
[[ "$REPEATS" =~ ^[1-9]$ ]] || die "REPEATS=$REPEATS: want 1-9 measurements per stage"
[[ "$POST_GROW_WAIT" =~ ^[0-9]+$ ]] || die "POST_GROW_WAIT=$POST_GROW_WAIT: want whole seconds"
[[ "$PERIOD_US" =~ ^[1-9][0-9]*$ ]] || die "PERIOD_US=$PERIOD_US: want microseconds"
[[ "$CAP" =~ ^[0-9]*\.?[0-9]+$ ]] || die "CAP=$CAP: want cores per node, e.g. 0.12"
QUOTA_US=$(awk -v c="$CAP" -v p="$PERIOD_US" 'BEGIN { printf "%d", c * p + 0.5 }')
# The kernel refuses quotas under 1 ms.
[ "$QUOTA_US" -ge 1000 ] || die "CAP=$CAP x PERIOD_US=$PERIOD_US is $QUOTA_US us, under the kernel's 1000 us minimum"
command -v jq >/dev/null || die "needs jq (the cluster's --json answers are read with it)"
for b in raftq-node raftq raftq-bench; do
	[ -x "$BIN/$b" ] || die "$BIN/$b missing (make build)"
done

# --- cgroups -----------------------------------------------------------
# cg_detect sets CGV (1 or 2) and CGP (the directory our cgroup goes in).
cg_detect() {
	if [ -n "${CGROUP_PARENT:-}" ]; then
		CGP=$CGROUP_PARENT
	else
		# A v1 hierarchy with the cpu controller ("cpu" or "cpu,cpuacct").
		CGP=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
		if [ -z "$CGP" ]; then
			CGP=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
		fi
	fi
	if [ -n "$CGP" ] && [ -f "$CGP/cpu.cfs_quota_us" ]; then
		CGV=1
	elif [ -n "$CGP" ] && [ -f "$CGP/cgroup.controllers" ] && grep -qw cpu "$CGP/cgroup.controllers"; then
		CGV=2
	else
		die "no cgroup with the cpu controller found (v1 cpu.cfs_quota_us or v2 cpu in cgroup.controllers); set CGROUP_PARENT"
	fi
	[ -w "$CGP" ] || die "cannot create cgroups in $CGP (run as root, or set CGROUP_PARENT to a delegated cgroup)"
}
# Stop what this script started, by pid, and remove its cgroups and data.
DATA=""
CG=""
declare -a pids=()
bench_pid=""
# shellcheck source=scripts/lib/stop.sh
. "$(dirname "$0")/lib/stop.sh"
cleanup() {
	# shellcheck disable=SC2086 # bench_pid is empty or one pid
	stop_pids 20 $bench_pid ${pids[@]+"${pids[@]}"}
	rm_cgroups ${CG:+"$CG"/n* "$CG"}
	[ -z "$DATA" ] || rm -rf "$DATA"
}
trap cleanup EXIT
trap 'say "interrupted: stopping the nodes"; exit 130' INT TERM

cg_detect
mkdir "$CGP/raftq-scale-$$" || die "mkdir $CGP/raftq-scale-$$ failed"
CG="$CGP/raftq-scale-$$"
DATA=$(mktemp -d "${DATA_PARENT:-/tmp}/raftq-scale-data.XXXXXX")
CLUSTER="raftq-scale-$$"
if [ "$CGV" = 2 ]; then
	# The children of CG may only use cpu.max if CG's parent and CG pass
	# the controller down.
	grep -qw cpu "$CGP/cgroup.subtree_control" || echo +cpu >"$CGP/cgroup.subtree_control"
	echo +cpu >"$CG/cgroup.subtree_control"
fi

# cg_node makes node I's cgroup and caps it.
cg_node() {
	local d="$CG/n$1"
	mkdir "$d"
	if [ "$CGV" = 1 ]; then
		echo "$PERIOD_US" >"$d/cpu.cfs_period_us"
		echo "$QUOTA_US" >"$d/cpu.cfs_quota_us"
	else
		echo "$QUOTA_US $PERIOD_US" >"$d/cpu.max"
	fi
}

# cg_cap prints node I's cap as the kernel holds it ("quota/period").
cg_cap() {
	if [ "$CGV" = 1 ]; then
		echo "$(cat "$CG/n$1/cpu.cfs_quota_us")/$(cat "$CG/n$1/cpu.cfs_period_us")"
	else
		tr ' ' / <"$CG/n$1/cpu.max"
	fi
}

# cg_throttled prints the sum over nodes 1..N of "nr_periods nr_throttled".
cg_throttled() {
	local i
	for i in $(seq 1 "$1"); do cat "$CG/n$i/cpu.stat"; done |
		awk '$1 == "nr_periods" { p += $2 } $1 == "nr_throttled" { t += $2 } END { print p + 0, t + 0 }'
}

# --- nodes ---------------------------------------------------------
port() { echo $((PORT_BASE + $2 + $1)); } # port NODE OFFSET
for i in $(seq 1 $((STAGES * 3))); do
	for off in 0 100 200 300 400; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$(port "$i" "$off")") 2>/dev/null; then
			die "port $(port "$i" "$off") is in use (another cluster?); set PORT_BASE"
		fi
	done
done
seeds="127.0.0.1:$(port 1 200),127.0.0.1:$(port 2 200),127.0.0.1:$(port 3 200)"

# start_node I ARGS...: node nI in its own capped cgroup; ARGS are its
# bootstrap flags. The wrapper shell writes its own pid into the cgroup
# and execs the node, so $! is the node and the node starts capped.
start_node() {
	local i=$1
	shift
	cg_node "$i"
	# shellcheck disable=SC2016 # $$ and $0 are the wrapper's, not ours
	# shellcheck disable=SC2086 # RAFTQ_NODE_ARGS is a list of flags
	bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/n$i" \
		"$BIN/raftq-node" --insecure --node-id "n$i" --data-dir "$DATA/n$i" --cluster-name "$CLUSTER" \
		--grpc-bind "127.0.0.1:$(port "$i" 0)" --raft-bind "127.0.0.1:$(port "$i" 100)" \
		--gossip-bind "127.0.0.1:$(port "$i" 200)" --http-bind "127.0.0.1:$(port "$i" 300)" \
		--peer-bind "127.0.0.1:$(port "$i" 400)" --join "$seeds" \
		--wal-segment-size 4MiB "$@" ${RAFTQ_NODE_ARGS:-} \
		>"$OUT/n$i.log" 2>&1 &
	pids[i]=$!
}

# check_nodes N fails when one of nodes 1..N has exited or is not in its
# capped cgroup.
check_nodes() {
	local i
	for i in $(seq 1 "$1"); do
		if ! kill -0 "${pids[i]}" 2>/dev/null; then
			say "node n$i (pid ${pids[i]}) exited; its log: $OUT/n$i.log"
			return 1
		fi
		if ! grep -qx "${pids[i]}" "$CG/n$i/cgroup.procs"; then
			say "node n$i (pid ${pids[i]}) is not in its cgroup $CG/n$i"
			return 1
		fi
	done
}

addrs_of() { # addrs_of N: gRPC addresses of nodes 1..N
	local i s=""
	for i in $(seq 1 "$1"); do s="$s${s:+,}127.0.0.1:$(port "$i" 0)"; done
	echo "$s"
}
pids_of() { # pids_of N
	local i s=""
	for i in $(seq 1 "$1"); do s="$s${s:+,}${pids[i]}"; done
	echo "$s"
}
cli() { "$BIN/raftq" --addr "$(addrs_of "$nodes")" --timeout 10s "$@"; }

# wait_for TIMEOUT WHAT CMD...: runs CMD every 2 s until it succeeds,
# while every node is up; fails after TIMEOUT seconds.
wait_for() {
	local limit=$1 what=$2 t0
	shift 2
	t0=$(date +%s)
	until "$@"; do
		check_nodes "$nodes" || return 1
		if [ $(($(date +%s) - t0)) -ge "$limit" ]; then
			say "$what: not after ${limit}s (last answers in $OUT/stage$stage.*.json, logs in $OUT)"
			return 1
		fi
		sleep 2 &
		wait $!
	done
}

ready() { cli cluster status >/dev/null 2>>"$OUT/cli.log"; }

# members FIRST LAST: nodes nFIRST..nLAST are alive meta members.
members() {
	local i
	cli --json cluster nodes >"$OUT/stage$stage.nodes.json" 2>>"$OUT/cli.log" || return 1
	for i in $(seq "$1" "$2"); do
		jq -e --arg id "n$i" 'any(.[]; .NodeID == $id and .State == "alive" and (.Meta == "voter" or .Meta == "nonvoter"))' \
			"$OUT/stage$stage.nodes.json" >/dev/null || return 1
	done
}

# grown NODES SHARDS: the growth to SHARDS on NODES is over: slot moves
# done and slots spread, replicas and leaders spread, the rebalancer idle.
grown() {
	local f="$OUT/stage$stage"
	cli --json cluster shards >"$f.shards.json" 2>>"$OUT/cli.log" && shards_done "$f.shards.json" "$2" &&
		cli --json cluster nodes >"$f.nodes.json" 2>>"$OUT/cli.log" && nodes_spread "$f.nodes.json" "$1" "$2" &&
		cli --json cluster rebalance --dry-run >"$f.rebalance.json" 2>>"$OUT/cli.log" && rebalance_idle "$f.rebalance.json"
}

# settled_twice NODES SHARDS: grown holds on two looks 5 s apart (a
# replica move or leader hand-off can start between two looks).
settled_twice() {
	grown "$@" || return 1
	sleep 5 &
	wait $!
	grown "$@"
}

# --- measuring ---------------------------------------------------------
hoststat() { awk '$1 == "cpu" { idle = $5 + $6; t = 0; for (i = 2; i <= 9; i++) t += $i; print t, idle }' /proc/stat; }
# The headline command (docs/benchmarks.md, "Headline throughput").
headline=(steady --producers 16 --consumers 8 --size 1024 --inflight 256 --batch 256)
declare -a rate benchcpu capuse throttled hostbusy lost detail allruns

# measure: the headline workload against every node of the stage,
# REPEATS times one after another; the stage's row is its median run (by
# processed/s) and its lost count the sum over the runs. A single run at
# a small cap swings by a third or more from the next (docs/benchmarks.md,
# "Scale model"), more than the bar allows for.
measure() {
	local k runs="$OUT/stage$stage.runs" mid lost_sum=0
	: >"$runs"
	for k in $(seq 1 "$REPEATS"); do
		measure_once "$OUT/stage$stage.run$k.json" || return 1
		printf '%s|%s|%s|%s|%s|%s|%s|%s\n' "${rate[stage]}" "$k" "${lost[stage]}" "${benchcpu[stage]}" \
			"${capuse[stage]}" "${throttled[stage]}" "${hostbusy[stage]}" "${detail[stage]}" >>"$runs"
		lost_sum=$((lost_sum + lost[stage]))
	done
	mid=$(sort -t'|' -k1,1n "$runs" | sed -n "$(((REPEATS + 1) / 2))p")
	IFS='|' read -r "rate[stage]" k _ "benchcpu[stage]" "capuse[stage]" "throttled[stage]" "hostbusy[stage]" "detail[stage]" <<<"$mid"
	lost[stage]=$lost_sum
	cp "$OUT/stage$stage.run$k.json" "$OUT/stage$stage.json"
	allruns[stage]=$(cut -d'|' -f1 "$runs" | paste -sd' ')
}

# measure_once JSON: one headline run; sets the stage's columns from it.
measure_once() {
	local j=$1 h0 h1 th0 th1 rc=0
	read -r -a h0 < <(hoststat)
	read -r -a th0 < <(cg_throttled "$nodes")
	say "stage $stage: $nodes nodes, $shards shards: measuring for ${DURATION}s"
	# PER_SHARD_LOAD=1: the headline's producers and consumers per shard,
	# so each shard sees the load the one shard of stage 1 saw.
	local load=()
	if [ "${PER_SHARD_LOAD:-0}" = 1 ]; then
		load=(--producers $((16 * shards)) --consumers $((8 * shards)))
	fi
	# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
	"$BIN/raftq-bench" "${headline[@]}" "${load[@]}" --duration "${DURATION}s" --quiet --json \
		--addr "$(addrs_of "$nodes")" --pids "$(pids_of "$nodes")" ${BENCH_ARGS:-} \
		>"$j" 2>"$OUT/stage$stage.bench.log" &
	bench_pid=$!
	wait "$bench_pid" || rc=$?
	bench_pid=""
	read -r -a h1 < <(hoststat)
	read -r -a th1 < <(cg_throttled "$nodes")
	if [ "$rc" != 0 ] || ! jq -e '.processed_per_s' "$j" >/dev/null 2>&1; then
		say "stage $stage: the bench failed (exit $rc): $(tail -3 "$OUT/stage$stage.bench.log" | tr '\n' ' ')"
		return 1
	fi
	rate[stage]=$(jq -r '.processed_per_s | floor' "$j")
	lost[stage]=$(jq -r '.lost' "$j")
	benchcpu[stage]=$(jq -r '(.cpu.client_cpu_s / .duration_s * 100 * 10 | round) / 10' "$j")
	capuse[stage]=$(jq -r --argjson n "$nodes" --argjson c "$CAP" \
		'if .cpu.server_cpu_s then (.cpu.server_cpu_s / .duration_s / ($n * $c) * 100 | round) else "-" end' "$j")
	throttled[stage]=$(awk -v a="${th0[0]}" -v b="${th0[1]}" -v c="${th1[0]}" -v d="${th1[1]}" \
		'BEGIN { if (c > a) printf "%.0f", (d - b) / (c - a) * 100; else print "-" }')
	hostbusy[stage]=$(awk -v a="${h0[0]}" -v b="${h0[1]}" -v c="${h1[0]}" -v d="${h1[1]}" \
		'BEGIN { printf "%.0f", (1 - (d - b) / (c - a)) * 100 }')
	detail[stage]=$(jq -r '"leaders \(.placement.leaders) (settled: \(.placement.settled)); enqueue p99 \(.enqueue_p99_ms) ms; e2e p99 \(.e2e_p99_ms) ms; unknown sends \(.unknown_sends); send errors \(.send_errors); revision \(.revision // "-")"' "$j")
}

# grow_to NODES SHARDS: adds nodes, grows the shard count, waits.
grow_to() {
	local want=$1 s=$2 first=$((nodes + 1)) i t0 t1 t2 dedup
	t0=$(date +%s)
	for i in $(seq "$first" "$want"); do start_node "$i" --bootstrap-expect 0; done
	nodes=$want
	wait_for "$JOIN_TIMEOUT" "stage $stage: n$first-n$want alive meta members" members "$first" "$want" || return 1
	t1=$(date +%s)
	# Asking again for the same count only reports progress, so a failed
	# call (a meta leader change, say) is retried; a refusal is not.
	for i in 1 2 3 4 5; do
		cli cluster shards set "$s" >"$OUT/stage$stage.grow.txt" 2>&1 && break
		if [ "$i" = 5 ] || grep -q 'unknown command\|only grows\|usage' "$OUT/stage$stage.grow.txt"; then
			say "stage $stage: raftq cluster shards set $s failed: $(tr '\n' ' ' <"$OUT/stage$stage.grow.txt")"
			return 1
		fi
		sleep 5 &
		wait $!
	done
	say "stage $stage: $(head -1 "$OUT/stage$stage.grow.txt")"
	shards=$s
	wait_for "$GROW_TIMEOUT" "stage $stage: slot moves done, replicas and leaders spread" settled_twice "$want" "$s" || return 1
	t2=$(date +%s)
	if [ "$POST_GROW_WAIT" -gt 0 ]; then
		sleep "$POST_GROW_WAIT" &
		wait $!
	fi
	# Done moves stay listed while sends to their slots still ask the old
	# shard for dedup keys (docs/operations.md, "Grow the shard count").
	cli --json cluster shards >"$OUT/stage$stage.shards.json" 2>>"$OUT/cli.log" || true
	dedup=$(jq -r '[.Moves[]? | select(.Phase == "done" or .Phase == "forget")] | length' "$OUT/stage$stage.shards.json" 2>/dev/null || echo "?")
	growth[stage]="joined in $((t1 - t0)) s, slots moved and rebalanced in $((t2 - t1)) s; $dedup done slot moves still in their dedup look-up window at the start"
}

# --- stages ------------------------------------------------------------
declare -a growth
failed=""
stage=1 nodes=3 shards=1
t0=$(date +%s)
loadavg=$(cut -d' ' -f1-3 /proc/loadavg)
for i in 1 2 3; do start_node "$i" --bootstrap-expect 3 --shards 1; done
say "cgroup v$CGV $CG: each node capped at $QUOTA_US/$PERIOD_US us ($CAP core); logs and report in $OUT"
if wait_for "$READY_TIMEOUT" "stage 1: cluster ready" ready && check_nodes 3; then
	say "stage 1: 3 nodes ready after $(($(date +%s) - t0)) s; caps $(for i in 1 2 3; do printf '%s ' "n$i=$(cg_cap "$i")"; done)"
	measure || failed="stage 1"
else
	failed="stage 1"
fi
for stage in $(seq 2 "$STAGES"); do
	[ -z "$failed" ] || break
	if grow_to $((stage * 3)) "$stage" && check_nodes "$nodes"; then
		measure || failed="stage $stage"
	else
		failed="stage $stage"
	fi
done
check_nodes "$nodes" || failed=${failed:-"the nodes after the last stage"}

# --- report ------------------------------------------------------------
report="$OUT/report.txt"
{
	echo "raftq scale model, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo -)"
	echo "cap: cgroup v$CGV, $QUOTA_US us of CPU per $PERIOD_US us period per node ($CAP core), $(nproc) cores on the host, load average at the start $loadavg"
	echo "workload: raftq-bench ${headline[*]} --duration ${DURATION}s${BENCH_ARGS:+ $BENCH_ARGS}, $REPEATS run(s) per stage (against every node of the stage, uncapped)$( [ "${PER_SHARD_LOAD:-0}" = 1 ] && echo "; producers and consumers x shards")"
	echo "node args: --wal-segment-size 4MiB ${RAFTQ_NODE_ARGS:-}"
	echo "caps as the kernel holds them (quota/period us):$(for i in $(seq 1 "$nodes"); do printf ' n%s=%s' "$i" "$(cg_cap "$i" 2>/dev/null || echo ?)"; done)"
	echo
	printf '%-6s %-6s %10s %9s %9s %9s %13s %10s %9s %5s\n' nodes shards processed/s "x stage1" "x linear" "bench-cpu" "node-cpu/cap" throttled host-busy lost
	for s in $(seq 1 "$STAGES"); do
		[ -n "${rate[s]:-}" ] || continue
		x1=$(awk -v a="${rate[s]}" -v b="${rate[1]}" 'BEGIN { printf "%.2f", a / b }')
		xl=$(awk -v a="${rate[s]}" -v b="${rate[1]}" -v n="$s" 'BEGIN { printf "%.2f", a / b / n }')
		printf '%-6s %-6s %10s %9s %9s %8s%% %12s%% %9s%% %8s%% %5s\n' $((s * 3)) "$s" "${rate[s]}" "$x1" "$xl" \
			"${benchcpu[s]}" "${capuse[s]}" "${throttled[s]}" "${hostbusy[s]}" "${lost[s]}"
	done
	echo
	echo "x linear: (processed/s / stage 1's) / (nodes / 3); the bar is 0.8. bench-cpu: the load generator's CPU in its"
	echo "measured window, % of one core. node-cpu/cap: the nodes' CPU in that window / (nodes x cap). throttled: share of"
	echo "the nodes' cgroup periods in which the cap stopped them; host-busy: the host's CPU in use, all cores, over the run."
	for s in $(seq 1 "$STAGES"); do
		[ -n "${rate[s]:-}" ] || continue
		echo "stage $s: ${detail[s]}"
		[ "$REPEATS" = 1 ] || echo "  processed/s of its $REPEATS runs: ${allruns[s]} (the median's row above; lost summed)"
		[ -z "${growth[s]:-}" ] || echo "  growth: ${growth[s]}"
	done
	for s in $(seq 2 "$STAGES"); do
		[ -n "${rate[s]:-}" ] || continue
		awk -v a="${rate[s]}" -v b="${rate[1]}" -v n="$s" -v s="$s" 'BEGIN {
			x = a / b / n
			printf "bar: %d nodes at %.2f x linear (>= 0.8 wanted): %s\n", s * 3, x, (x >= 0.8 ? "met" : "NOT met")
		}'
	done
	[ -z "$failed" ] || echo "FAILED at $failed (logs and the cluster's last answers in $OUT)"
} | tee "$report"
if [ -n "$failed" ]; then
	exit 1
fi
