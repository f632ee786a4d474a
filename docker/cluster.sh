#!/usr/bin/env bash
# Grow and shrink the running compose cluster (docker/compose.yaml) one
# node at a time.
#
#   docker/cluster.sh add N      start node nN (4 or 5: the services
#                                compose.yaml defines under profiles) and
#                                wait until it is healthy and alive in
#                                `raftq cluster nodes`
#   docker/cluster.sh remove N   `raftq cluster remove-node nN --wait`
#                                (moves its replicas to other nodes, takes it
#                                out of meta, retires its id), then stop and
#                                remove its container and its data volume
#   docker/cluster.sh nodes      `raftq cluster nodes` as a running node sees it
#
# make compose-add-node N=4 and make compose-remove-node N=4 run the first two.
# The CLI runs inside a running node's container (the image has raftq), so
# nothing but Docker is needed on the host.
#
# Environment:
#   RAFTQ_PROJECT      compose project (default raftq, as make compose-up)
#   RAFTQ_REMOVE_WAIT  how long remove waits for the drain (default 30m)
#   RAFTQ_IMAGE, RAFTQ_PORT_PREFIX, RAFTQ_SUBNET_PREFIX, RAFTQ_SHARDS,
#   RAFTQ_LOG_LEVEL    compose.yaml's knobs; unset, each is read from a
#                      running node of the project, so the new node gets the
#                      same image, subnet and port prefix as the others.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
project=${RAFTQ_PROJECT:-raftq}
remove_wait=${RAFTQ_REMOVE_WAIT:-30m}

die() {
	echo "cluster: $*" >&2
	exit 1
}
say() { echo "cluster: $*"; }

dk() { timeout 60 docker "$@"; }

if timeout 15 docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	compose_cmd=(docker-compose)
else
	die "needs docker compose (v2) or docker-compose (v1.28+, for profiles)"
fi
compose() { timeout 180 "${compose_cmd[@]}" -p "$project" -f "$root/docker/compose.yaml" "$@"; }

# container SERVICE prints the id of the service's container, running or
# not, or nothing.
container() {
	dk ps -aq --filter "label=com.docker.compose.project=$project" \
		--filter "label=com.docker.compose.service=$1" | head -n1
}

# running_nodes prints the services of the project's running containers.
running_nodes() {
	dk ps --filter "label=com.docker.compose.project=$project" \
		--format '{{.Label "com.docker.compose.service"}}' | sort
}

# cli_via EXCEPT ARGS... runs the raftq CLI in a running node's container
# other than the service EXCEPT ("" for none), with every other running
# node as a seed. The CLI's --timeout bounds it (a drain's --wait is added
# to it), not a timeout of our own.
cli_via() {
	local except=$1 n via="" seeds=""
	shift
	for n in $(running_nodes); do
		[[ $n == "$except" ]] && continue
		via=${via:-$n}
		seeds+="${seeds:+,}$n:7101"
	done
	[[ -n $via ]] || die "no running node in project $project${except:+ other than $except} (make compose-up starts it)"
	docker exec "$(container "$via")" raftq --addr "$seeds" --timeout 15s "$@"
}
cli() { cli_via "" "$@"; }

# node_state ID prints ID's STATE column in `cluster nodes` (alive,
# suspect, dead, left, unknown, retired; ",draining" appended while it is
# removed), or nothing if the cluster does not list it.
node_state() { cli cluster nodes 2>/dev/null | awk -v id="$1" '$1 == id { print $5 }'; }

# infer_env sets compose.yaml's knobs the caller left unset from a running
# node of the project, so the added node matches the others: compose
# refuses to reuse a network whose subnet changed.
infer_env() {
	local ref env port
	ref=$(container "$(running_nodes | head -n1)")
	[[ -n $ref ]] || die "no running node in project $project (make compose-up starts it)"
	env=$(dk inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$ref")
	if [[ -z ${RAFTQ_IMAGE:-} ]]; then
		RAFTQ_IMAGE=$(dk inspect --format '{{.Config.Image}}' "$ref")
	fi
	if [[ -z ${RAFTQ_SUBNET_PREFIX:-} ]]; then
		RAFTQ_SUBNET_PREFIX=$(sed -n 's/^RAFTQ_GOSSIP_ADVERTISE=\([0-9.]*\)\.[0-9]*:.*/\1/p' <<<"$env")
	fi
	if [[ -z ${RAFTQ_PORT_PREFIX:-} ]]; then
		port=$(dk port "$ref" 7101/tcp | head -n1)
		port=${port##*:}
		[[ $port =~ ^[0-9]+[0-9]{3}$ ]] || die "cannot read the port prefix from $ref's published gRPC port ($port); set RAFTQ_PORT_PREFIX"
		RAFTQ_PORT_PREFIX=${port%???}
	fi
	if [[ -z ${RAFTQ_SHARDS:-} ]]; then
		RAFTQ_SHARDS=$(sed -n 's/^RAFTQ_SHARDS=//p' <<<"$env")
	fi
	if [[ -z ${RAFTQ_LOG_LEVEL:-} ]]; then
		RAFTQ_LOG_LEVEL=$(sed -n 's/^RAFTQ_LOG_LEVEL=//p' <<<"$env")
	fi
	export RAFTQ_IMAGE RAFTQ_SUBNET_PREFIX RAFTQ_PORT_PREFIX RAFTQ_SHARDS RAFTQ_LOG_LEVEL
}

health() { dk inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$1" 2>/dev/null || echo gone; }

add() {
	local n=n$1 id state deadline
	case $1 in
	4 | 5) ;;
	*) die "add $1: compose.yaml defines n4 and n5 to add; for another node copy the n5 service and change its id, addresses, ports and volume (docs/deploy.md)" ;;
	esac
	id=$(container "$n")
	if [[ -n $id && $(dk inspect --format '{{.State.Running}}' "$id") == true ]]; then
		die "$n is already running"
	fi
	state=$(node_state "$n")
	if [[ $state == retired ]]; then
		die "$n was removed and its id is retired for good: the cluster refuses it. Add the other spare node, or copy the service under a new id (docs/deploy.md)"
	fi
	infer_env
	say "starting $n (image $RAFTQ_IMAGE, ${RAFTQ_SUBNET_PREFIX}.1$1, ports ${RAFTQ_PORT_PREFIX}10$1/${RAFTQ_PORT_PREFIX}40$1/${RAFTQ_PORT_PREFIX}50$1 on 127.0.0.1)"
	compose --profile "$n" up -d --no-deps "$n"
	id=$(container "$n")
	deadline=$((SECONDS + 120))
	until [[ $(health "$id") == healthy ]]; do
		((SECONDS < deadline)) || die "$n not healthy after 120 s ($(health "$id")); docker logs $id"
		sleep 2
	done
	deadline=$((SECONDS + 60))
	until [[ $(node_state "$n") == alive ]]; do
		((SECONDS < deadline)) || die "$n healthy but not alive in cluster nodes after 60 s"
		sleep 1
	done
	say "$n joined: healthy, alive in cluster nodes (it holds no shard replica until one is moved to it: raftq cluster replace-node)"
	cli cluster nodes
}

remove() {
	local n=n$1 id state vol
	[[ $1 =~ ^[0-9]+$ ]] || die "remove $1: want a node number (remove 4 removes n4)"
	state=$(node_state "$n")
	[[ -n $state ]] || die "the cluster does not know $n (docker/cluster.sh nodes lists the nodes)"
	if [[ $state != retired ]]; then
		say "draining $n: raftq cluster remove-node $n --wait $remove_wait"
		# Refused (fewer than 3 meta voters left, a shard no other node can
		# take) or not done in time: stop here, with the node untouched.
		cli_via "$n" cluster remove-node "$n" --wait "$remove_wait" || die "remove-node $n did not complete; $n is left running"
	else
		say "$n is already retired"
	fi
	[[ $(node_state "$n") == retired ]] || die "$n is not shown retired after remove-node"
	id=$(container "$n")
	if [[ -n $id ]]; then
		say "stopping and removing $n's container"
		compose --profile "$n" stop "$n" >/dev/null 2>&1 || dk stop -t 30 "$id" >/dev/null
		compose --profile "$n" rm -f "$n" >/dev/null 2>&1 || dk rm -f "$id" >/dev/null
	fi
	vol="${project}_$n-data"
	if dk volume inspect "$vol" >/dev/null 2>&1; then
		say "removing volume $vol"
		dk volume rm "$vol" >/dev/null
	fi
	say "$n removed: retired, its container and volume gone"
	cli cluster nodes
}

case ${1:-} in
add | remove)
	[[ $# -eq 2 ]] || die "usage: $0 $1 N"
	"$1" "$2"
	;;
nodes)
	cli cluster nodes
	;;
*)
	die "usage: $0 add N | remove N | nodes"
	;;
esac
