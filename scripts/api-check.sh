#!/usr/bin/env bash
# api-check: lint the public API (api/) and check that it stays compatible
# with the previous commit's (docs/api.md, "Compatibility").
#
# The base is HEAD~1, or HEAD while api/ has uncommitted changes, or
# API_BASE when set (e.g. API_BASE=origin/main). A break the base..HEAD
# commits declare with a trailer "API-Break: <reason>" is reported and
# allowed; any other break fails. BUF names the buf binary (the Makefile
# installs a pinned one).
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-buf}

fail() {
	echo "api-check FAILED: $*" >&2
	exit 1
}

"$BUF" lint || fail "buf lint found the problems above (rules and exceptions: buf.yaml)"

git rev-parse --git-dir >/dev/null 2>&1 || fail "not a git checkout: the breaking check compares against an earlier commit"
base=${API_BASE:-}
if [ -z "$base" ]; then
	if [ -n "$(git status --porcelain -- api)" ]; then
		base=HEAD
	else
		base=HEAD~1
	fi
fi
if ! git rev-parse --verify -q "$base^{commit}" >/dev/null &&
	[ "$(git rev-parse --is-shallow-repository)" = true ]; then
	# A CI checkout of depth 1 lacks the previous commit: ask its remote.
	git fetch --quiet --deepen=1 2>/dev/null || true
fi
if ! git rev-parse --verify -q "$base^{commit}" >/dev/null; then
	if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
		fail "$base is not in this shallow clone; fetch one more commit (git fetch --deepen=1) or set API_BASE to a commit it has"
	fi
	fail "no commit $base to compare the API against (the first commit?); set API_BASE to a commit"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp" --wildcards '*.proto'
# The base is read with today's rules (which files are checked and how).
cp buf.yaml "$tmp/"

reasons=""
if [ "$(git rev-parse "$base")" != "$(git rev-parse HEAD)" ]; then
	reasons=$(git log --format='%(trailers:key=API-Break,valueonly,separator=%x2C )' "$base..HEAD" | sed '/^$/d')
fi
if out=$("$BUF" breaking --against "$tmp" 2>&1); then
	echo "api-check: api/ lints clean and is compatible with $base"
	exit 0
fi
echo "$out" >&2
if [ -n "$reasons" ]; then
	echo "api-check: api/ breaks compatibility with $base, as declared (API-Break):" >&2
	echo "$reasons" | sed 's/^/  /' >&2
	exit 0
fi
if [ "$base" = HEAD ]; then
	fail "api/ (uncommitted) breaks compatibility with HEAD; undo the change, or if the break is intended commit it with a trailer 'API-Break: <reason>' (docs/api.md)"
fi
fail "api/ breaks compatibility with $base; if intended, the commit that breaks it must carry a trailer 'API-Break: <reason>' (docs/api.md)"
