# shellcheck shell=bash
# Sourced by the scripts under scripts/ that start nodes: stopping what
# they started, by pid, and removing the cgroups they made.

# stop_pids SECONDS PID...: SIGTERM to each, up to SECONDS for each to
# exit, then SIGKILL; reaps them (they are children of the calling shell).
stop_pids() {
	local limit=$(($1 * 10)) p
	shift
	for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "$@"; do
		for _ in $(seq "$limit"); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}

# rm_cgroups DIR...: removes each cgroup directory, children first as
# given. A cgroup can be removed once its last process has gone, which the
# kernel may take a moment to see after the wait; prints the ones left.
rm_cgroups() {
	local d left=""
	for d in "$@"; do
		[ -d "$d" ] || continue
		for _ in $(seq 50); do
			rmdir "$d" 2>/dev/null && break
			sleep 0.1
		done
		[ ! -d "$d" ] || left="$left $d"
	done
	[ -z "$left" ] || echo "could not remove cgroups:$left" >&2
}
