#!/usr/bin/env bash
# Network partition helper for the compose cluster (a nemesis backend for
# jepsen-lite): cut one node's container off the cluster network, or put it
# back with the same IP and DNS names.
#
#   docker/partition.sh isolate NODE   disconnect NODE from the cluster network
#   docker/partition.sh heal NODE      reconnect it (same IP, same aliases)
#   docker/partition.sh heal-all       reconnect every isolated node
#   docker/partition.sh status         one line per node: connected|isolated
#
# NODE is a compose service name (n1) or a container name or id.
# Environment:
#   RAFTQ_PROJECT   compose project name (default: raftq, as make compose-up)
#   RAFTQ_NETWORK   cluster network (default: <project>_raftq)
#
# The helper keeps no state: the IP to restore is read from the container's
# own RAFTQ_GOSSIP_ADVERTISE, which compose pins to the node's fixed address;
# keeping the IP matters because memberlist advertises it. Isolating an
# isolated node or healing a connected one does nothing and succeeds.
# A disconnected container keeps running but has no network at all: peers,
# clients and its published host ports all lose it, as in a real partition.
set -euo pipefail

project=${RAFTQ_PROJECT:-raftq}
network=${RAFTQ_NETWORK:-${project}_raftq}

die() {
	echo "partition: $*" >&2
	exit 1
}

dk() { timeout 30 docker "$@"; }

# container resolves NODE to a container id.
container() {
	local id
	id=$(dk ps -aq --filter "label=com.docker.compose.project=$project" \
		--filter "label=com.docker.compose.service=$1" | head -n1)
	if [[ -z $id ]]; then
		id=$(dk inspect --format '{{.Id}}' "$1" 2>/dev/null) || die "no container for node $1 in project $project"
	fi
	echo "$id"
}

connected() {
	[[ -n $(dk inspect --format "{{with index .NetworkSettings.Networks \"$network\"}}{{.NetworkID}}{{end}}" "$1") ]]
}

isolate() {
	local id
	id=$(container "$1")
	if ! connected "$id"; then
		echo "partition: $1 already isolated from $network"
		return
	fi
	dk network disconnect "$network" "$id"
	echo "partition: isolated $1 from $network"
}

heal() {
	local id adv ip service host
	id=$(container "$1")
	if connected "$id"; then
		echo "partition: $1 already connected to $network"
		return
	fi
	adv=$(dk inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$id" | sed -n 's/^RAFTQ_GOSSIP_ADVERTISE=//p')
	ip=${adv%:*}
	[[ $ip =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$1: RAFTQ_GOSSIP_ADVERTISE=$adv holds no IPv4 address to restore"
	service=$(dk inspect --format '{{index .Config.Labels "com.docker.compose.service"}}' "$id")
	host=$(dk inspect --format '{{.Config.Hostname}}' "$id")
	local args=(--ip "$ip" --alias "$service")
	if [[ -n $host && $host != "$service" ]]; then
		args+=(--alias "$host")
	fi
	dk network connect "${args[@]}" "$network" "$id"
	echo "partition: healed $1 ($ip) into $network"
}

nodes() {
	dk ps -a --filter "label=com.docker.compose.project=$project" \
		--format '{{.Label "com.docker.compose.service"}}' | sort -u
}

case ${1:-} in
isolate | heal)
	[[ $# -eq 2 ]] || die "usage: $0 $1 NODE"
	"$1" "$2"
	;;
heal-all)
	for n in $(nodes); do heal "$n"; done
	;;
status)
	for n in $(nodes); do
		if connected "$(container "$n")"; then echo "$n connected"; else echo "$n isolated"; fi
	done
	;;
*)
	die "usage: $0 isolate NODE | heal NODE | heal-all | status"
	;;
esac
