#!/usr/bin/env bash
# Says, before `make test` runs, which fault suites this machine cannot
# run: they skip on a developer's machine, and fail under
# RAFTQ_STRICT_FAULTS=1 (.ci/run sets it), where this script fails first
# so a CI machine missing something stops at once with the reason.
set -uo pipefail
missing=()
if [ "$(id -u)" != 0 ]; then
	missing+=("root: the netns partition tests (jepsen-lite/netns, systest/grayfail), the disk fault tests and make jepsen-smoke")
fi
for tool in ip iptables; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool: the netns partition tests and make jepsen-smoke")
done
for tool in truncate losetup mkfs.ext4 mount umount fsfreeze; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool: the disk fault tests (loop filesystems)")
done
[ -x /usr/bin/chromium ] || missing+=("/usr/bin/chromium (Debian package chromium): the console browser test (console/browser_test.go)")
if ! command -v docker >/dev/null 2>&1 || ! timeout 15 docker info >/dev/null 2>&1; then
	missing+=("a Docker engine: make compose-smoke")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "${RAFTQ_STRICT_FAULTS:-}" = 1 ]; then
	echo "FAIL: RAFTQ_STRICT_FAULTS=1 and this machine lacks what fault suites need:" >&2
	printf '  - %s\n' "${missing[@]}" >&2
	exit 1
fi
echo "########################################################################"
echo "WARNING: fault suites will SKIP on this machine (CI fails on them):"
printf '  - missing %s\n' "${missing[@]}"
echo "########################################################################"
