#!/usr/bin/env bash
# Compose smoke test of a three-node raftq cluster in containers.
#
#   docker/smoke.sh          (make compose-smoke runs it with a hard timeout)
#
# Without a Docker engine it prints "skipped: no Docker engine" and exits 0
# (exit 1 under RAFTQ_STRICT_FAULTS=1, which .ci/run sets).
# Otherwise it builds raftq:dev and bin/raftq, starts the cluster under a
# unique compose project on free host ports, and checks through the published
# ports with the host CLI:
#   1. all three nodes become healthy (raftq-node probe) and see each other;
#   2. queue create, send, receive, ack; then fan-out: a FIFO topic with two
#      subscriptions (one filtered), publishes counted per subscription, a
#      repeated dedup key, group order, a --from earliest replay, a refused
#      delete; one publication stays until the end, after step 6, and must
#      then be received once on each subscription;
#   3. docker kill of the node leading shard 0 while several senders have
#      sends in flight (with dedup keys, each retried until acknowledged,
#      going on until N more were acknowledged): sends continue, a drain receives every
#      acknowledged send under the id its send was answered with, and any
#      second message for one body (a duplicate dedup should have stopped)
#      or delivery again after a confirmed ack fails the smoke;
#   4. docker start of the killed node: healthy again, seen alive;
#   5. docker/partition.sh isolates a follower: the rest still serves; after
#      heal the node catches up to the majority's commit index;
#   6. docker/cluster.sh add 4 joins n4 (alive in cluster nodes); N sends;
#      cluster replace-node n3 n4 moves n3's replicas to n4 and
#      docker/cluster.sh remove 3 deletes the retired n3's container and
#      volume; docker/cluster.sh add 5, then remove 5 (remove-node --wait):
#      n5 retired, container and volume gone; cluster shards set grows
#      the shard count by one (every slot move done), the N sends repeated
#      with their keys are duplicates; the N sends are received through
#      n1, n2 and n4.
# The project and its volumes are removed at the end, pass or fail, and so
# are dangling raftq images (an earlier raftq:dev this build replaced).
#
# Knobs: RAFTQ_SMOKE_N (sends acknowledged after the kill, default 40),
# RAFTQ_SMOKE_SENDERS (concurrent senders, default 4), RAFTQ_SMOKE_KEEP=1
# (leave the cluster running for a post-mortem).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# skip WHY: a developer's machine without Docker skips (loudly); under
# RAFTQ_STRICT_FAULTS=1 (.ci/run) the smoke may not skip, so it fails.
skip() {
	if [[ ${RAFTQ_STRICT_FAULTS:-} == 1 ]]; then
		echo "smoke: FAIL: $1, and RAFTQ_STRICT_FAULTS=1 forbids skipping the compose smoke" >&2
		exit 1
	fi
	echo "skipped: $1"
	exit 0
}
if ! command -v docker >/dev/null 2>&1 || ! timeout 15 docker info >/dev/null 2>&1; then
	skip "no Docker engine"
fi
if timeout 15 docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1 && timeout 15 docker-compose version >/dev/null 2>&1; then
	compose_cmd=(docker-compose)
else
	skip "no docker compose"
fi
for tool in jq timeout curl; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "smoke: $tool is required" >&2
		exit 1
	}
done

n_msgs=${RAFTQ_SMOKE_N:-40}
n_senders=${RAFTQ_SMOKE_SENDERS:-4}
sender_pids=()
queue=smoke
project=""
work=$(mktemp -d "${TMPDIR:-/tmp}/raftq-smoke.XXXXXX")
summary=()

log() { printf '[%3ds] %s\n' "$SECONDS" "$*"; }
fail() {
	log "FAIL: $*"
	exit 1
}
note() {
	summary+=("$*")
	log "$*"
}

compose() { timeout 120 "${compose_cmd[@]}" -p "$project" -f "$root/docker/compose.yaml" "$@"; }
# compose_all also covers the nodes added later (profiles n4, n5).
compose_all() { compose --profile n4 --profile n5 "$@"; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	local p
	for p in "${sender_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [[ -n $project ]]; then
		if [[ $rc -ne 0 ]]; then
			local logs="${TMPDIR:-/tmp}/$project.log"
			compose_all logs --no-color >"$logs" 2>&1 || true
			log "container logs saved to $logs; the last lines:"
			tail -n 15 "$logs" | cut -c1-300 | sed 's/^/    /'
		fi
		if [[ ${RAFTQ_SMOKE_KEEP:-0} == 1 ]]; then
			log "RAFTQ_SMOKE_KEEP=1: leaving project $project up (${compose_cmd[*]} -p $project -f docker/compose.yaml --profile n4 --profile n5 down -v)"
		else
			compose_all down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
		fi
	fi
	rm -rf "$work"
	# Rebuilding raftq:dev leaves the image it replaced untagged; remove
	# such images once no container uses them (only raftq's, by label).
	timeout 60 docker image prune -f --filter "label=org.opencontainers.image.title=raftq" >/dev/null 2>&1 || true
	if [[ $rc -eq 0 ]]; then
		echo "smoke: PASS in ${SECONDS}s"
		printf 'smoke:   %s\n' "${summary[@]}"
	else
		echo "smoke: FAIL (exit $rc) after ${SECONDS}s"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- build -------------------------------------------------------------------

log "building bin/raftq, bin/raftq-node and the raftq:dev image"
timeout 300 make -s build
# make build links static binaries (CGO_ENABLED=0); reuse them in the image
# when the engine runs the host's architecture.
prebuilt=""
if [[ $(timeout 20 docker version --format '{{.Server.Arch}}') == $(go env GOARCH) ]]; then
	prebuilt="$root/bin"
fi
RAFTQ_PREBUILT=$prebuilt timeout 420 "$root/docker/build-image.sh" raftq:dev
cli_bin="$root/bin/raftq"

# ---- start -------------------------------------------------------------------

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

export RAFTQ_IMAGE=raftq:dev RAFTQ_SHARDS=${RAFTQ_SHARDS:-4} RAFTQ_LOG_LEVEL=info
started=0
for attempt in 1 2 3; do
	project="raftqsmoke$$-$attempt"
	# Prefixes 20-29 keep every host port (up to <prefix>505) below the
	# kernel's ephemeral range (32768 up, on Linux), where any process's
	# outgoing connections may take a port between the check below and
	# compose binding it (n4's, 40 s later, on a loaded machine); and
	# clear of a developer's cluster (17) and jepsen-lite's (30-59).
	RAFTQ_PORT_PREFIX=$((RANDOM % 10 + 20))
	RAFTQ_SUBNET_PREFIX="172.29.$((RANDOM % 200 + 20))"
	export RAFTQ_PORT_PREFIX RAFTQ_SUBNET_PREFIX
	free=1
	for p in 101 102 103 104 105 401 402 403 404 405 501 502 503 504 505; do port_free "$RAFTQ_PORT_PREFIX$p" || free=0; done
	if ((free == 0)); then
		project=""
		continue
	fi
	log "starting project $project (ports ${RAFTQ_PORT_PREFIX}101-103, subnet $RAFTQ_SUBNET_PREFIX.0/24)"
	up_at=$SECONDS
	if compose up -d >"$work/up.log" 2>&1; then
		started=1
		break
	fi
	sed 's/^/    /' "$work/up.log"
	compose_all down -v --remove-orphans -t 1 >/dev/null 2>&1 || true
	project=""
done
((started)) || fail "could not start the compose project"
net="${project}_raftq"
# The nodes run with TLS from the development CA compose.yaml's certs
# service made; the host CLI trusts it.
certs_cid=$(compose ps -a -q certs)
[[ -n $certs_cid ]] || fail "no certs container"
for f in ca.crt client-admin.crt client-admin.key; do
	timeout 30 docker cp "$certs_cid:/certs/$f" "$work/$f" >/dev/null || fail "could not copy $f out of the certs container"
done
# The nodes run --client-auth require: the CLI presents the development
# client certificate.
export RAFTQ_CA="$work/ca.crt" RAFTQ_CERT="$work/client-admin.crt" RAFTQ_KEY="$work/client-admin.key"

declare -A cid port mport
for n in n1 n2 n3; do
	cid[$n]=$(compose ps -q "$n")
	[[ -n ${cid[$n]} ]] || fail "no container for $n"
	port[$n]="127.0.0.1:${RAFTQ_PORT_PREFIX}10${n#n}"
	mport[$n]="127.0.0.1:${RAFTQ_PORT_PREFIX}40${n#n}"
done
all_addrs="${port[n1]},${port[n2]},${port[n3]}"

# ---- helpers -----------------------------------------------------------------

# cli ADDRS ARGS... runs the host CLI against the given seeds, bounded by
# $cli_timeout (retries inside the CLI included).
cli_timeout=15s
cli() {
	local addrs=$1
	shift
	timeout 30 "$cli_bin" --addr "$addrs" --timeout "$cli_timeout" "$@"
}

health() { timeout 10 docker inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$1" 2>/dev/null || echo gone; }

wait_healthy() { # SECONDS NODE...
	local deadline=$((SECONDS + $1)) n ok
	shift
	while :; do
		ok=1
		for n in "$@"; do [[ $(health "${cid[$n]}") == healthy ]] || ok=0; done
		((ok)) && return 0
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

# status ADDRS prints `cluster status --json` of the node that answers.
status() { cli "$1" cluster status --json; }

# Field access that accepts Go field names or snake_case JSON keys.
jq_alive='[(.Members // .members // [])[] | select((.State // .state) == "alive")] | length'
jq_shards='(.Shards // .shards // [])[]'
jq_leader_of() { echo "$jq_shards | select((.ID // .id // .shard_id // 0) == $1) | (.LeaderID // .leader_id // \"\")"; }

# wait_status SECONDS ADDRS JQ_FILTER: poll until the filter prints true.
wait_status() {
	local deadline=$((SECONDS + $1)) out
	while :; do
		if out=$(status "$2" 2>/dev/null) && [[ $(jq -r "$3" <<<"$out" 2>/dev/null) == true ]]; then
			echo "$out" >"$work/status.json"
			return 0
		fi
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

# shard_metric NODE NAME prints "shard value" lines of raftq_shard_NAME from
# the node's own /metrics: its local view, whichever node leads.
shard_metric() {
	curl -fsS --max-time 5 "http://${mport[$1]}/metrics" |
		awk -v m="raftq_shard_$2" 'index($1, m "{shard=\"") == 1 { split($1, a, "\""); printf "%s %d\n", a[2], $2 }'
}

# commit_marks "NODE..." prints "shard index" lines: the highest commit
# index any of the nodes reports for each shard.
commit_marks() {
	local n
	for n in $1; do shard_metric "$n" commit_index; done |
		awk '{ if (!($1 in m) || $2 > m[$1]) m[$1] = $2 } END { for (s in m) print s, m[s] }' | sort -n
}

# wait_caught_up SECONDS NODE MARKS: poll until NODE has applied every
# shard up to the index in MARKS; the lagging shards go to $work/lag.
wait_caught_up() {
	local deadline=$((SECONDS + $1))
	while :; do
		shard_metric "$2" applied_index >"$work/applied" 2>/dev/null || true
		awk 'NR == FNR { a[$1] = $2; next } !($1 in a) || a[$1] < $2 { printf "shard %s applied %s < %s; ", $1, ($1 in a ? a[$1] : "none"), $2; bad = 1 } END { exit bad }' \
			"$work/applied" "$3" >"$work/lag" && return 0
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

# send_retry ADDRS BODY DEDUP: retry until the send is acknowledged; the
# body and the id it was answered with go to $work/acked.main.
send_retries=0
send_dedups=0
send_retry() {
	local deadline=$((SECONDS + 45)) out
	# A short bound per attempt: a CLI whose shard map still names a dead
	# leader would otherwise wait out its whole per-call timeout there,
	# while a fresh CLI loads the new map.
	until out=$(cli_timeout=6s cli "$1" send "$queue" "$2" --dedup "$3" --json 2>&1); do
		send_retries=$((send_retries + 1))
		((SECONDS < deadline)) || fail "send $2 never acknowledged: $out"
		sleep 0.3
	done
	if [[ $(jq -r '.deduplicated' <<<"$out" 2>/dev/null) == true ]]; then
		send_dedups=$((send_dedups + 1))
	fi
	printf '%s %s %s\n' "$2" "$(jq -r '.id' <<<"$out")" "$(date +%s%3N)" >>"$work/acked.main"
}

# sender S: one of several concurrent senders, run in the background.
# Sends sS-1, sS-2, ... one after another with dedup keys, each retried
# until acknowledged (60 s at most), until $work/stop exists, and appends
# "body id ms" of every acknowledged send to $work/acked.S. $work/busy.S
# exists while one of its sends is in flight.
sender() {
	local s=$1 i out deadline body
	for ((i = 1; ; i++)); do
		[[ ! -e $work/stop ]] || return 0
		body="s$s-$i"
		deadline=$((SECONDS + 60))
		while :; do
			: >"$work/busy.$s"
			if out=$(cli_timeout=6s cli "$all_addrs" send "$queue" "$body" --dedup "k-$body" --json 2>&1); then
				break
			fi
			rm -f "$work/busy.$s"
			echo retry >>"$work/stats.$s"
			if ((SECONDS >= deadline)); then
				echo "send $body never acknowledged: $out" >"$work/failed.$s"
				return 1
			fi
			sleep 0.3
		done
		rm -f "$work/busy.$s"
		if [[ $(jq -r '.deduplicated' <<<"$out") == true ]]; then echo dedup >>"$work/stats.$s"; fi
		printf '%s %s %s\n' "$body" "$(jq -r '.id' <<<"$out")" "$(date +%s%3N)" >>"$work/acked.$s"
	done
}

# lines FILE... counts the lines of the files that exist.
lines() {
	local n=0 f
	for f; do
		if [[ -f $f ]]; then n=$((n + $(wc -l <"$f"))); fi
	done
	echo "$n"
}

# drain ADDRS SECONDS PREFIX: receive and ack until every acknowledged
# send whose body starts with PREFIX ($work/acked.*) was seen. A body
# delivered under another id than its send was answered with, or under two
# ids, is a duplicate dedup should have prevented: drain_dup_ids lists them.
# A message delivered again although every ack of it was confirmed is in
# drain_resurrected. Sets drain_missing, drain_redeliveries, drain_ack_fails.
drain() {
	local addrs=$1 deadline=$((SECONDS + $2)) prefix=$3 out b id i n ok
	local -A want=() seen=() acked=()
	drain_dup_ids=()
	drain_resurrected=()
	drain_missing=()
	drain_redeliveries=0
	drain_ack_fails=0
	while read -r b id _; do
		[[ $b == "$prefix"* ]] && want[$b]=$id
	done < <(cat "$work"/acked.* 2>/dev/null)
	while ((${#seen[@]} < ${#want[@]})) && ((SECONDS < deadline)); do
		out=$(cli "$addrs" receive "$queue" --max 100 --wait 2s --json 2>/dev/null) || {
			sleep 0.5
			continue
		}
		mapfile -t bodies < <(jq -r '.[]? | .body // ""' <<<"$out")
		mapfile -t ids < <(jq -r '.[]? | .id' <<<"$out")
		mapfile -t receipts < <(jq -r '.[]? | .receipt' <<<"$out")
		for i in "${!bodies[@]}"; do
			b=${bodies[$i]} id=${ids[$i]}
			[[ $b == "$prefix"* ]] || continue
			if [[ -n ${want[$b]:-} && ${want[$b]} != "$id" ]]; then
				drain_dup_ids+=("$b as $id, its send was answered ${want[$b]}")
			elif [[ -n ${seen[$b]:-} && ${seen[$b]} != "$id" ]]; then
				drain_dup_ids+=("$b as ${seen[$b]} and $id")
			elif [[ -n ${seen[$b]:-} ]]; then
				drain_redeliveries=$((drain_redeliveries + 1))
				[[ -n ${acked[$id]:-} ]] && drain_resurrected+=("$b ($id)")
			fi
			seen[$b]=$id
		done
		((${#receipts[@]} > 0)) || continue
		# A failed ack only means the message comes back after its lease.
		if out=$(cli "$addrs" ack "${receipts[@]}" --json 2>/dev/null); then
			mapfile -t ok < <(jq -r '.[]? | .ok' <<<"$out")
			for i in "${!receipts[@]}"; do
				if [[ ${ok[$i]:-false} == true ]]; then
					acked[${ids[$i]}]=1
				else
					drain_ack_fails=$((drain_ack_fails + 1))
				fi
			done
		else
			drain_ack_fails=$((drain_ack_fails + ${#receipts[@]}))
		fi
	done
	for b in "${!want[@]}"; do
		[[ -n ${seen[$b]:-} ]] || drain_missing+=("$b")
	done
}

# drain_verdict WHAT fails the smoke on anything drain found wrong.
drain_verdict() {
	((${#drain_missing[@]} == 0)) || fail "$1: acknowledged sends lost: ${drain_missing[*]}"
	((${#drain_dup_ids[@]} == 0)) || fail "$1: sends with dedup keys stored twice: ${drain_dup_ids[*]}"
	((${#drain_resurrected[@]} == 0)) || fail "$1: delivered again after a confirmed ack: ${drain_resurrected[*]}"
}

# ---- 1. formation ------------------------------------------------------------

wait_healthy 120 n1 n2 n3 || fail "nodes not healthy: n1=$(health "${cid[n1]}") n2=$(health "${cid[n2]}") n3=$(health "${cid[n3]}")"
note "formed: 3 nodes healthy $((SECONDS - up_at))s after compose up (project $project)"
wait_status 30 "$all_addrs" "($jq_alive) == 3 and ([$jq_shards | (.LeaderID // .leader_id // \"\") | select(. != \"\")] | length) == ${RAFTQ_SHARDS}" ||
	fail "status never showed 3 alive members and a leader for every shard"

# ---- 2. basic traffic --------------------------------------------------------

deadline=$((SECONDS + 30))
until out=$(cli "$all_addrs" queue create "$queue" --visibility 5s 2>&1); do
	((SECONDS < deadline)) || fail "queue create: $out"
	sleep 1
done
send_retry "$all_addrs" hello k-hello
out=$(cli "$all_addrs" receive "$queue" --max 1 --wait 5s --json) || fail "receive: $out"
[[ $(jq -r '.[0].body' <<<"$out") == hello ]] || fail "receive returned $out"
receipt=$(jq -r '.[0].receipt' <<<"$out")
out=$(cli "$all_addrs" ack "$receipt" --json) || fail "ack: $out"
[[ $(jq -r '.[0].ok' <<<"$out") == true ]] || fail "ack returned $out"
note "traffic: queue create, send, receive, ack through ${all_addrs}"
# The nodes run --client-auth require: without credentials the CLI is
# refused, and says why.
if out=$(RAFTQ_CERT="" RAFTQ_KEY="" cli "$all_addrs" queue list 2>&1); then
	fail "queue list without credentials succeeded: $out"
fi
[[ $out == *"requires credentials"* ]] || fail "queue list without credentials: $out"
note "client auth: a call without credentials refused: ${out#raftq: }"
# An API key with the producer role sends on its queue, may not purge it,
# and stops working once revoked; the audit trail names it.
out=$(cli "$all_addrs" keys create smoke-producer --grant "producer:$queue") || fail "keys create: $out"
token=$(sed -n 's/^token (shown once; keep it secret): //p' <<<"$out")
[[ $token == rqk_* ]] || fail "keys create printed no token: $out"
keyed() { RAFTQ_CERT="" RAFTQ_KEY="" RAFTQ_TOKEN="$token" cli "$@"; }
out=$(keyed "$all_addrs" send "$queue" keyed-hello 2>&1) || fail "send with the producer key: $out"
if out=$(keyed "$all_addrs" queue purge "$queue" 2>&1); then
	fail "a producer key purged the queue: $out"
fi
[[ $out == *"key/smoke-producer may not call Queues/PurgeQueue"* ]] || fail "purge with a producer key: $out"
# The web console (docs/console.md) on n1's published HTTP port: plaintext
# is redirected to https, a login with the key over TLS (the compose CA)
# starts a session, and the queues page lists the key's queue.
code=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{redirect_url}' "http://${mport[n1]}/console/queues") || fail "console over plaintext: no answer"
[[ $code == "301 https://${mport[n1]}/console/queues" ]] || fail "console over plaintext: $code, want a redirect to https"
jar="$work/console.cookies"
code=$(curl -sS --max-time 10 --cacert "$work/ca.crt" -c "$jar" -o /dev/null -w '%{http_code}' \
	-H "Origin: https://${mport[n1]}" --data-urlencode "token=$token" "https://${mport[n1]}/console/login") || fail "console login: no answer"
[[ $code == 303 ]] || fail "console login with the producer key: HTTP $code, want 303"
page=$(curl -sS --max-time 10 --cacert "$work/ca.crt" -b "$jar" "https://${mport[n1]}/console/queues") || fail "console queues page: no answer"
[[ $page == *"key/smoke-producer"* && $page == *"data-queue=\"$queue\""* ]] || fail "console queues page lacks the principal or queue $queue"
note "console: plaintext redirected to https, logged in as key/smoke-producer, queue $queue listed"
cli "$all_addrs" keys revoke smoke-producer >/dev/null || fail "keys revoke"
deadline=$((SECONDS + 10))
# whoami, which changes nothing, until every node has applied the revoke.
for a in ${all_addrs//,/ }; do
	while out=$(keyed "$a" whoami 2>&1); do
		((SECONDS < deadline)) || fail "the revoked key is still taken at $a: $out"
		sleep 0.5
	done
	[[ $out == *"not valid on this cluster"* ]] || fail "the revoked key at $a: $out"
done
if out=$(keyed "$all_addrs" send "$queue" late 2>&1); then
	fail "the revoked key sent: $out"
fi
out=$(cli "$all_addrs" audit --limit 1000) || fail "audit: $out"
[[ $out == *key/smoke-producer*Queues/PurgeQueue*PermissionDenied* && $out == *Access/RevokeKey* ]] || fail "audit trail: $out"
note "api keys: a producer key sent, was refused a purge and, revoked, refused a send; the audit trail names it"
out=$(cli "$all_addrs" receive "$queue" --max 1 --wait 5s --json) || fail "receive: $out"
[[ $(jq -r '.[0].body' <<<"$out") == keyed-hello ]] || fail "receive after the keyed send returned $out"
receipt=$(jq -r '.[0].receipt' <<<"$out")
cli "$all_addrs" ack "$receipt" >/dev/null || fail "ack the keyed send"

# ---- 2b. fan-out -------------------------------------------------------------

# recv_bodies SUB: receive and ack from SUB until a receive finds nothing;
# prints the bodies in delivery order, space-separated.
recv_bodies() {
	local got=() out b r n=0
	while out=$(cli "$all_addrs" receive "$1" --max 10 --wait 2s --json) && [[ $(jq length <<<"$out") -gt 0 ]]; do
		((++n <= 20)) || { echo "recv_bodies $1: still receiving after 20 rounds: ${got[*]}" >&2; return 1; }
		mapfile -t b < <(jq -r '.[].body' <<<"$out")
		mapfile -t r < <(jq -r '.[].receipt' <<<"$out")
		got+=("${b[@]}")
		cli "$all_addrs" ack "${r[@]}" >/dev/null || fail "ack on $1"
	done
	[[ -n $out ]] || fail "receive from $1"
	echo "${got[*]}"
}
# publish_expect BODY DELIVERIES FLAGS...: a publish through the CLI must
# report DELIVERIES copies (or be deduplicated when DELIVERIES is "dedup").
publish_expect() {
	local body=$1 want=$2 out
	shift 2
	out=$(cli "$all_addrs" topic publish smoke-orders "$body" --group c-1 "$@" --json) || fail "topic publish $body: $out"
	if [[ $want == dedup ]]; then
		[[ $(jq -r '"\(.deduplicated) \(.deliveries)"' <<<"$out") == "true 0" ]] || fail "repeat publish of $body not deduplicated: $out"
	else
		[[ $(jq -r '"\(.deduplicated) \(.deliveries)"' <<<"$out") == "false $want" ]] || fail "publish $body: $out, want $want deliveries"
	fi
}
out=$(cli "$all_addrs" topic create smoke-orders --fifo --retention 1h 2>&1) || fail "topic create: $out"
cli "$all_addrs" topic subscribe smoke-orders smoke-orders-all --visibility 5s >/dev/null || fail "topic subscribe smoke-orders-all"
cli "$all_addrs" topic subscribe smoke-orders smoke-orders-eu --filter 'attr.region ^= eu-' --visibility 5s >/dev/null ||
	fail "topic subscribe smoke-orders-eu"
publish_expect t-1 2 --attr region=eu-west --dedup kt-1
publish_expect t-2 1 --attr region=us-east
publish_expect t-1 dedup --attr region=eu-west --dedup kt-1
[[ $(recv_bodies smoke-orders-all) == "t-1 t-2" ]] || fail "smoke-orders-all did not get t-1 t-2 in order"
[[ $(recv_bodies smoke-orders-eu) == t-1 ]] || fail "smoke-orders-eu (filtered) did not get t-1 alone"
cli "$all_addrs" topic subscribe smoke-orders smoke-orders-replay --from earliest --visibility 5s >/dev/null ||
	fail "topic subscribe smoke-orders-replay"
[[ $(recv_bodies smoke-orders-replay) == "t-1 t-2" ]] || fail "smoke-orders-replay (--from earliest) did not replay t-1 t-2"
if out=$(cli "$all_addrs" topic delete smoke-orders 2>&1); then
	fail "a topic with subscriptions was deleted: $out"
fi
cli "$all_addrs" topic unsubscribe smoke-orders-replay >/dev/null || fail "topic unsubscribe smoke-orders-replay"
# t-3 stays in smoke-orders-all through the kill, partition, node changes and
# shard growth below, and is received at the end.
publish_expect t-3 2 --attr region=eu-north
note "fan-out: topic smoke-orders with 2 subscriptions (one filtered) through the CLI: deliveries 2/1, a repeat key deduplicated, group order kept, --from earliest replayed 2, delete refused with subscriptions"

# ---- 3. kill a shard leader during sends -------------------------------------

victim=$(jq -r "$(jq_leader_of 0)" "$work/status.json")
[[ -n ${cid[$victim]:-} ]] || fail "shard 0 leader '$victim' is not one of n1..n3"
for ((s = 1; s <= n_senders; s++)); do
	sender "$s" &
	sender_pids+=($!)
done
# The kill lands once every sender has had two sends acknowledged and at
# least two have one in flight.
deadline=$((SECONDS + 60))
while :; do
	started=1
	for ((s = 1; s <= n_senders; s++)); do (($(lines "$work/acked.$s") >= 2)) || started=0; done
	busy=$(find "$work" -maxdepth 1 -name 'busy.*' | wc -l)
	((started && busy >= 2)) && break
	((SECONDS < deadline)) || fail "the $n_senders senders never all got going ($(lines "$work"/acked.[0-9]*) sends acknowledged, $busy in flight)"
	sleep 0.02
done
timeout 30 docker kill "${cid[$victim]}" >/dev/null
kill_ms=$(date +%s%3N)
before=$(lines "$work"/acked.[0-9]*)
log "killed $victim (leader of shard 0) with $busy of $n_senders senders in flight, after $before acknowledged sends"
# The senders go on until n_msgs sends were acknowledged after the kill.
deadline=$((SECONDS + 90))
until (($( (cat "$work"/acked.[0-9]* 2>/dev/null || true) | awk -v k="$kill_ms" '$3 > k' | wc -l) >= n_msgs)); do
	((SECONDS < deadline)) || fail "fewer than $n_msgs sends acknowledged in 90 s after killing $victim"
	sleep 0.2
done
: >"$work/stop"
failed=()
for s in "${!sender_pids[@]}"; do
	wait "${sender_pids[$s]}" || failed+=("$(cat "$work/failed.$((s + 1))" 2>/dev/null || echo "sender $((s + 1)) failed")")
done
sender_pids=()
((${#failed[@]} == 0)) || fail "${failed[*]}"
n_msgs=$(lines "$work"/acked.[0-9]*)
after=$( (cat "$work"/acked.[0-9]* 2>/dev/null || true) | awk -v k="$kill_ms" '$3 > k' | wc -l)
send_retries=$( (cat "$work"/stats.* 2>/dev/null || true) | grep -c retry || true)
send_dedups=$( (cat "$work"/stats.* 2>/dev/null || true) | grep -c dedup || true)
resume=$(cat "$work"/acked.[0-9]* | awk -v k="$kill_ms" '$3 > k && (m == "" || $3 < m) { m = $3 } END { if (m == "") print "never"; else printf "%.1f", (m - k) / 1000 }')
survivors=""
survivors_list=""
for n in n1 n2 n3; do
	[[ $n == "$victim" ]] && continue
	survivors+="${survivors:+,}${port[$n]}"
	survivors_list+=" $n"
done
wait_status 30 "$survivors" "[$(jq_leader_of 0)] | (.[0] != \"\" and .[0] != \"$victim\")" ||
	fail "shard 0 never got a new leader after killing $victim"
new_leader=$(jq -r "$(jq_leader_of 0)" "$work/status.json")
drain "$all_addrs" 60 s
drain_verdict "after killing $victim"
note "leader kill: killed $victim with $busy of $n_senders senders in flight, shard 0 moved to $new_leader; the first send after the kill was acknowledged ${resume}s after it; $n_msgs/$n_msgs acknowledged sends ($after after the kill) drained, 0 lost, 0 stored twice; $drain_redeliveries redeliveries ($drain_ack_fails failed drain acks); $send_retries send retries, $send_dedups deduplicated retries"

# ---- 4. restart the killed node ----------------------------------------------

# The cluster's commit index of every shard now; the restarted node must
# apply up to it.
commit_marks "$survivors_list" >"$work/commits"
log "restart policy left $victim: $(timeout 10 docker inspect --format '{{.State.Status}}' "${cid[$victim]}")"
timeout 30 docker start "${cid[$victim]}" >/dev/null
restart_at=$SECONDS
wait_healthy 90 "$victim" || fail "$victim not healthy after docker start: $(health "${cid[$victim]}")"
wait_status 30 "$all_addrs" "($jq_alive) == 3" || fail "cluster status does not show $victim alive after restart"
wait_caught_up 30 "$victim" "$work/commits" || fail "$victim did not catch up after restart: $(cat "$work/lag")"
note "rejoin: $victim healthy, alive in cluster status and caught up on all ${RAFTQ_SHARDS} shards $((SECONDS - restart_at))s after docker start"

# ---- 5. partition a follower -------------------------------------------------

# The follower: not the meta leader, leading as few shards as possible.
status "$all_addrs" >"$work/status.json" || fail "status before partition"
meta_leader=$(jq -r '.MetaLeaderID // .meta_leader_id // ""' "$work/status.json")
follower=""
best=999
for n in n1 n2 n3; do
	[[ $n == "$meta_leader" ]] && continue
	led=$(jq "[$jq_shards | select((.LeaderID // .leader_id) == \"$n\")] | length" "$work/status.json")
	if ((led < best)); then
		best=$led
		follower=$n
	fi
done
majority=""
majority_list=()
for n in n1 n2 n3; do
	[[ $n == "$follower" ]] && continue
	majority+="${majority:+,}${port[$n]}"
	majority_list+=("$n")
done
export RAFTQ_PROJECT=$project RAFTQ_NETWORK=$net
"$root/docker/partition.sh" isolate "$follower" | sed 's/^/    /'
part_at=$SECONDS
wait_status 20 "$majority" "[(.Members // .members)[] | select((.NodeID // .node_id) == \"$follower\") | (.State // .state)] | .[0] != \"alive\"" ||
	fail "the majority still sees $follower alive 20s after isolating it"
m=10
for ((i = 1; i <= m; i++)); do send_retry "$majority" "p-$i" "kp-$i"; done
drain "$majority" 40 p-
drain_verdict "while $follower was isolated"
commit_marks "${majority_list[*]}" >"$work/commits"
note "partition: isolated $follower (led $best shard(s)); the majority served $m sends, $m drained, 0 lost, in $((SECONDS - part_at))s"

"$root/docker/partition.sh" heal "$follower" | sed 's/^/    /'
heal_at=$SECONDS
wait_caught_up 60 "$follower" "$work/commits" ||
	fail "$follower did not catch up to the majority's commit indexes within 60s after heal: $(cat "$work/lag")"
wait_status 30 "$all_addrs" "($jq_alive) == 3" || fail "cluster status does not show $follower alive after heal"
wait_healthy 30 "$follower" || fail "$follower unhealthy after heal"
note "heal: $follower reconnected, alive in cluster status, applied up to the majority's commit index on all ${RAFTQ_SHARDS} shards $((SECONDS - heal_at))s after heal"

send_retry "${port[$follower]}" f-1 k-f-1
drain "$all_addrs" 20 f-
drain_verdict "the send through $follower"
out=$(cli "$all_addrs" queue stats "$queue" --json) || fail "queue stats: $out"
note "final: send with $follower as seed received and acked; queue stats $(jq -c '{ready, in_flight, dead}' <<<"$out")"

# ---- 6. add nodes, move replicas onto one, remove two ----------------------

# jq over `cluster nodes --json` (Go field names or snake_case keys).
jq_node() { echo "[.[] | select((.NodeID // .node_id) == \"$1\")][0]"; }
nodes_json() { cli "$1" cluster nodes --json; }

# add_node N: docker/cluster.sh add N, then nN must be alive and a meta
# nonvoter in cluster nodes.
add_node() {
	local t0=$SECONDS out
	"$root/docker/cluster.sh" add "$1" >"$work/add$1.log" 2>&1 || {
		sed 's/^/    /' "$work/add$1.log"
		fail "docker/cluster.sh add $1"
	}
	port[n$1]="127.0.0.1:${RAFTQ_PORT_PREFIX}10$1"
	out=$(nodes_json "$all_addrs") || fail "cluster nodes: $out"
	[[ $(jq -r "$(jq_node "n$1") | \"\(.State // .state) \(.Meta // .meta)\"" <<<"$out") == "alive nonvoter" ]] ||
		fail "cluster nodes does not list n$1 alive as a meta nonvoter: $(jq -c "$(jq_node "n$1")" <<<"$out")"
	added_in=$((SECONDS - t0))
}

# remove_node N SEEDS: docker/cluster.sh remove N, then nN must be retired
# and its container and volume gone.
remove_node() {
	local out
	"$root/docker/cluster.sh" remove "$1" >"$work/remove$1.log" 2>&1 || {
		sed 's/^/    /' "$work/remove$1.log"
		fail "docker/cluster.sh remove $1"
	}
	out=$(nodes_json "$2") || fail "cluster nodes: $out"
	[[ $(jq -r "$(jq_node "n$1") | (.Retired // .retired)" <<<"$out") == true ]] ||
		fail "n$1 not retired after docker/cluster.sh remove $1: $(jq -c "$(jq_node "n$1")" <<<"$out")"
	[[ -z $(timeout 30 docker ps -aq --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=n$1") ]] ||
		fail "n$1's container is still there after remove"
	! timeout 30 docker volume inspect "${project}_n$1-data" >/dev/null 2>&1 || fail "n$1's volume ${project}_n$1-data is still there after remove"
}

add_node 4
note "add: docker/cluster.sh add 4 took ${added_in}s; n4 alive in cluster nodes, a meta nonvoter holding no replica"
m=20
for ((i = 1; i <= m; i++)); do send_retry "$all_addrs" "e-$i" "ke-$i"; done

# n4 takes n3's replicas; n3, retired by that, is then removed.
move_at=$SECONDS
out=$(timeout 150 "$cli_bin" --addr "$all_addrs" --timeout 15s cluster replace-node n3 n4 --wait 2m 2>&1) ||
	fail "replace-node n3 n4: $out"
moved=$((SECONDS - move_at))
rest="${port[n1]},${port[n2]},${port[n4]}"
remove_node 3 "$rest"
out=$(nodes_json "$rest") || fail "cluster nodes: $out"
n4_shards=$(jq -r "$(jq_node n4) | [(.Replicas // .replicas // [])[]] | length" <<<"$out")
((n4_shards == RAFTQ_SHARDS)) || fail "n4 holds $n4_shards of ${RAFTQ_SHARDS} shards after replacing n3: $(jq -c "$(jq_node n4)" <<<"$out")"
[[ $(jq -r "$(jq_node n4) | (.Meta // .meta)" <<<"$out") == voter ]] || fail "n4 is not a meta voter after replacing n3"
note "replace: replace-node n3 n4 moved ${RAFTQ_SHARDS} shards in ${moved}s, n4 a meta voter; docker/cluster.sh remove 3 left n3 retired, its container and volume gone"

# n5 joins and is removed through remove-node (it holds no replica).
add_node 5
remove_at=$SECONDS
remove_node 5 "$rest"
note "add+remove: docker/cluster.sh add 5 took ${added_in}s, remove 5 (remove-node n5 --wait, stop, rm, volume rm) $((SECONDS - remove_at))s; n5 retired"

# The shard count grows by one online; the sends acknowledged before it
# are received after it, and sent again with their keys they are
# duplicates of the first, wherever their slots went.
grown=$((RAFTQ_SHARDS + 1))
grow_at=$SECONDS
out=$(timeout 60 "$cli_bin" --addr "$rest" --timeout 15s cluster shards set "$grown" 2>&1) || fail "cluster shards set $grown: $out"
jq_grown='(.Count // .count) == $n and ([(.Moves // .moves // [])[] | (.Phase // .phase)] | all(. == "done")) and ([(.SlotsPerShard // .slots_per_shard)[]] | min > 0)'
until out=$(cli "$rest" cluster shards --json 2>&1) && jq -e --argjson n "$grown" "$jq_grown" <<<"$out" >/dev/null; do
	((SECONDS - grow_at < 90)) || fail "slot moves not done 90s after growing to $grown shards: $out"
	sleep 1
done
grown_in=$((SECONDS - grow_at))
dedups_before=$send_dedups
for ((i = 1; i <= m; i++)); do send_retry "$rest" "e-$i" "ke-$i"; done
((send_dedups - dedups_before == m)) || fail "$((send_dedups - dedups_before)) of $m sends repeated after the growth were duplicates"
note "grow: cluster shards set $grown moved its slots in ${grown_in}s; $m keys sent before it deduplicated after it"

drain "$rest" 40 e-
drain_verdict "after replacing n3 by n4, removing n3 and n5 and growing to $grown shards"
note "no loss: $m/$m sends acknowledged before n4 joined received through n1, n2, n4 at the end"

# The publication held since step 2b is still there, once, for each
# subscription; then the topic goes.
all_addrs=$rest
[[ $(recv_bodies smoke-orders-all) == t-3 ]] || fail "smoke-orders-all lost t-3 across the kill, partition, node changes and growth"
[[ $(recv_bodies smoke-orders-eu) == t-3 ]] || fail "smoke-orders-eu lost t-3 across the kill, partition, node changes and growth"
for s in smoke-orders-all smoke-orders-eu; do cli "$all_addrs" topic unsubscribe "$s" >/dev/null || fail "topic unsubscribe $s"; done
cli "$all_addrs" topic delete smoke-orders >/dev/null || fail "topic delete smoke-orders"
note "fan-out: t-3, published before the kill, received once on both subscriptions after growing to $grown shards; topic deleted"
