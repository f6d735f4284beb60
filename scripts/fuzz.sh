#!/usr/bin/env bash
# Fuzzes each target (package:Target) for FUZZTIME.
#
# Compiling is most of the cost: `go test -fuzz` builds a test binary with
# every dependency coverage-instrumented, and did so (or at least linked it,
# several at a time, before any of them had filled the build cache) once per
# target. So each package's instrumented test binary is built once, BUILDJOBS
# at a time (`go test -c -fuzz=.`; vet is left to `make check`), and each of
# its targets is run by executing that binary the way `go test -fuzz` does:
# in the package's directory, so the seed corpus and committed failing inputs
# under testdata/fuzz are read and a new failing input is written there, and
# with the fuzz cache of `go test` ($GOCACHE/fuzz/IMPORTPATH), so the inputs
# found interesting on earlier runs are kept.
#
# Targets run JOBS at a time, each with its share of the cores as workers
# (-test.parallel); every target's output is printed whole when it ends. A
# run that fails without writing a failing input is Go's fuzzing harness
# missing its own deadline on a busy machine ("context deadline exceeded"),
# not a finding: that target is run once more. A real finding always writes
# its input under testdata/fuzz and fails the run.
#
# A target its package's binary does not have fails the run, rather than
# fuzzing nothing. With ALL set to package patterns (make fuzz: ./...), a
# fuzz test of those packages missing from the targets fails the run too.
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
JOBS=${JOBS:-2}
BUILDJOBS=${BUILDJOBS:-1}
ALL=${ALL:-}
if [ "${BASH_VERSINFO[0]}" -lt 5 ] || { [ "${BASH_VERSINFO[0]}" -eq 5 ] && [ "${BASH_VERSINFO[1]}" -lt 1 ]; }; then
	echo "fuzz: needs bash 5.1 or later (wait -p), this is $BASH_VERSION" >&2
	exit 2
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
workers=$((cores / JOBS)); [ "$workers" -ge 1 ] || workers=1
cache=$("$GO" env GOCACHE) || exit 2
out=$(mktemp -d) || exit 2
trap 'rm -rf "$out"' EXIT

# pool N FUNC ITEM...: runs `FUNC ITEM LOG` for each item, N at a time (the
# next starts when any ends), printing each LOG whole when its run ends;
# fails if any run failed.
pool() {
	local n=$1 fn=$2 i=0 failed=0 pid
	shift 2
	local -A logs=()
	for item in "$@"; do
		if [ ${#logs[@]} -ge "$n" ]; then
			wait -n -p pid "${!logs[@]}" || failed=1
			cat "${logs[$pid]}"; unset "logs[$pid]"
		fi
		i=$((i + 1))
		"$fn" "$item" "$out/$fn.$i.log" & logs[$!]=$out/$fn.$i.log
	done
	while [ ${#logs[@]} -gt 0 ]; do
		wait -n -p pid "${!logs[@]}" || failed=1
		cat "${logs[$pid]}"; unset "logs[$pid]"
	done
	return $failed
}

# The packages, in the order first named, each with its directory and
# import path.
declare -A dir=() importpath=()
pkgs=()
for t in "$@"; do
	pkg=${t%%:*}
	if [ "$pkg" = "$t" ] || [ -z "${t##*:}" ]; then
		echo "fuzz: $t is not package:Target" >&2
		exit 2
	fi
	[ -n "${dir[$pkg]+set}" ] || { dir[$pkg]=; pkgs+=("$pkg"); }
done
[ ${#pkgs[@]} -gt 0 ] || exit 0
listing=$("$GO" list -f '{{join .Match " "}}|{{.Dir}}|{{.ImportPath}}' "${pkgs[@]}") || exit 2
while IFS='|' read -r matches d ip; do
	for m in $matches; do dir[$m]=$d; importpath[$m]=$ip; done
done <<<"$listing"

# Every fuzz test of the packages ALL names must be a target: one added to
# a package's tests but not to the list would never be fuzzed.
if [ -n "$ALL" ]; then
	declare -A wanted=()
	for t in "$@"; do wanted[${dir[${t%%:*}]}:${t##*:}]=1; done
	missing=()
	# shellcheck disable=SC2086 # ALL is a list of patterns
	all=$("$GO" list -f '{{.Dir}}|{{.ImportPath}}|{{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' $ALL) || exit 2
	while IFS='|' read -r d ip files; do
		for f in $files; do
			for name in $(sed -nE 's/^func (Fuzz([^a-z(][A-Za-z0-9_]*)?)\(.*/\1/p' "$d/$f"); do
				[ -n "${wanted[$d:$name]+set}" ] || missing+=("$ip $name ($f)")
			done
		done
	done <<<"$all"
	if [ ${#missing[@]} -gt 0 ]; then
		echo "fuzz: these fuzz tests are not in the list of targets (the Makefile's FUZZ), so would never be fuzzed:" >&2
		printf '  %s\n' "${missing[@]}" >&2
		exit 1
	fi
fi

declare -A bin=()
for k in "${!pkgs[@]}"; do bin[${pkgs[$k]}]=$out/$k.test; done

build() {
	local pkg=$1 log=$2 st start=$SECONDS
	echo "build $pkg: its fuzz-instrumented test binary" >"$log"
	"$GO" test -c -fuzz=. -vet=off -o "${bin[$pkg]}" "$pkg" >>"$log" 2>&1; st=$?
	if [ $st -ne 0 ]; then
		echo "FAIL build $pkg" >>"$log"
		return $st
	fi
	echo "built $pkg in $((SECONDS - start))s" >>"$log"
}

# run PKG NAME: fuzzes one target with its package's binary, as go test
# would run it.
run() {
	(cd "${dir[$1]}" && "${bin[$1]}" -test.run='^$' -test.fuzz="^$2\$" \
		-test.fuzztime="$FUZZTIME" -test.parallel="$workers" \
		-test.fuzzcachedir="$cache/fuzz/${importpath[$1]}" \
		-test.paniconexit0 -test.timeout=10m) 2>&1
}

fuzz() {
	local pkg=${1%%:*} name=${1##*:} log=$2 st
	echo "fuzz $pkg $name ($FUZZTIME)" >"$log"
	if [ ! -x "${bin[$pkg]}" ]; then
		echo "FAIL fuzz $pkg $name: its package did not build" >>"$log"
		echo "$1" >>"$out/failed"
		return 1
	fi
	# Listed whole before it is searched: grep -q ending the pipe at the
	# first match would fail the listing (SIGPIPE, with pipefail).
	local list
	list=$("${bin[$pkg]}" -test.list='^Fuzz' 2>&1) || {
		echo "FAIL fuzz $pkg $name: its binary could not list its fuzz tests: $list" >>"$log"
		echo "$1" >>"$out/failed"
		return 1
	}
	if ! grep -qx "$name" <<<"$list"; then
		echo "FAIL fuzz $pkg $name: the package has no fuzz test $name" >>"$log"
		echo "$1" >>"$out/failed"
		return 1
	fi
	run "$pkg" "$name" >>"$log"; st=$?
	if [ $st -ne 0 ] && ! grep -q "Failing input written" "$log"; then
		echo "fuzz $pkg $name: the harness failed without a finding; running it again" >>"$log"
		run "$pkg" "$name" >>"$log"; st=$?
	fi
	if [ $st -ne 0 ]; then
		echo "FAIL fuzz $pkg $name" >>"$log"
		echo "$1" >>"$out/failed"
	fi
	return $st
}

failed=0 start=$SECONDS
pool "$BUILDJOBS" build "${pkgs[@]}" || failed=1
echo "fuzz: ${#pkgs[@]} test binaries built in $((SECONDS - start))s, $BUILDJOBS at a time"
start=$SECONDS
pool "$JOBS" fuzz "$@" || failed=1
echo "fuzz: $# targets run in $((SECONDS - start))s, $JOBS at a time"
if [ -s "$out/failed" ]; then
	echo "fuzz: failed:"
	sed 's/^/  /' "$out/failed"
fi
exit $failed
