#!/usr/bin/env bash
# Build the raftq image (default tag raftq:dev) without pulling anything:
# compile static binaries on the host, then `docker build` a FROM scratch
# image from a throwaway context. Usage: docker/build-image.sh [TAG]
# RAFTQ_PREBUILT=DIR takes raftq-node and raftq from DIR instead (they must
# be static linux binaries for the engine's architecture).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-${RAFTQ_IMAGE:-raftq:dev}}
go=${GO:-go}

# Build for the engine's architecture, not necessarily the host's.
arch=$(timeout 20 docker version --format '{{.Server.Arch}}')
version=$(git -C "$root" describe --always --dirty 2>/dev/null || echo dev)

ctx=$(mktemp -d "${TMPDIR:-/tmp}/raftq-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT

if [[ -n ${RAFTQ_PREBUILT:-} ]]; then
	# Reuse static binaries built for this architecture (make build), e.g.
	# from the smoke test, instead of linking them again.
	cp "$RAFTQ_PREBUILT/raftq-node" "$RAFTQ_PREBUILT/raftq" "$ctx/"
else
	(
		cd "$root"
		# Same flags as `make build` (no -trimpath) so the compile cache is
		# shared and only the link step reruns.
		for pair in raftq-node:./cmd/node raftq:./cmd/raftq; do
			CGO_ENABLED=0 GOOS=linux GOARCH="$arch" "$go" build -buildvcs=auto \
				-ldflags "-s -w" -o "$ctx/${pair%%:*}" "${pair#*:}"
		done
	)
fi
mkdir -m 0755 "$ctx/data"
mkdir -m 0700 "$ctx/certs"
mkdir -m 1777 "$ctx/tmp"
cp "$root/docker/Dockerfile" "$ctx/Dockerfile"

# The output (and the legacy builder's deprecation notice) only matters
# when the build fails.
if ! out=$(timeout 300 docker build --build-arg "VERSION=$version" -t "$tag" "$ctx" 2>&1); then
	echo "$out" >&2
	echo "docker build of $tag failed" >&2
	exit 1
fi
echo "built $tag ($version, linux/$arch)"
# The build moved the tag; the image it named before is left dangling
# (<none>). Remove such raftq images, and only those: prune takes dangling
# images only, skips any a container still uses, and the label is this
# Dockerfile's.
timeout 60 docker image prune -f --filter "label=org.opencontainers.image.title=raftq" >/dev/null || true
