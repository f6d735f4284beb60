#!/usr/bin/env bash
# Fuzzes each target (package:Target) for FUZZTIME.
#
# Compiling is most of the cost: `go test -fuzz` builds a test binary with
# every dependency instrumented for coverage. Run once per target, it linked
# that binary again for every target, and the targets run side by side
# compiled the same dependencies side by side while the build cache was cold.
# So each package's instrumented test binary is built once (`go test -c
# -fuzz=.`, stripped as go test strips it; vet is left to `make check`): the
# package with the most dependencies first and alone, which fills the build
# cache with most of what the others need, then the others BUILDJOBS at a
# time, which then mostly link. Each of a package's targets is run by
# executing its binary the way `go test -fuzz` does: in the package's
# directory, so the seed corpus and committed failing inputs under
# testdata/fuzz are read and a new failing input is written there, and with
# the fuzz cache of `go test` ($GOCACHE/fuzz/IMPORTPATH), so the inputs found
# interesting on earlier runs are kept.
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
BUILDJOBS=${BUILDJOBS:-2}
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

declare -A bin=() pkgof=()
for k in "${!pkgs[@]}"; do
	bin[${pkgs[$k]}]=$out/$k.test
	pkgof[${importpath[${pkgs[$k]}]}]=${pkgs[$k]}
done

# The build order: the most dependencies first (of the test binary's main
# package); a package without one (no tests: its build fails) last.
order=()
declare -A ordered=()
while read -r _ main; do
	pkg=${pkgof[${main%.test}]:-}
	[ -n "$pkg" ] && [ -z "${ordered[$pkg]+set}" ] || continue
	ordered[$pkg]=1; order+=("$pkg")
done < <("$GO" list -test -f '{{if eq .Name "main"}}{{len .Deps}} {{.ImportPath}}{{end}}' "${pkgs[@]}" | sort -rn)
for pkg in "${pkgs[@]}"; do [ -n "${ordered[$pkg]+set}" ] || order+=("$pkg"); done

build() {
	local pkg=$1 log=$2 st start=$SECONDS
	echo "build $pkg: its fuzz-instrumented test binary" >"$log"
	"$GO" test -c -fuzz=. -vet=off -ldflags='-s -w' -o "${bin[$pkg]}" "$pkg" >>"$log" 2>&1; st=$?
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

# failed TARGET LOG [WHY]: says that TARGET failed, and lists it for the end.
failed() {
	echo "FAIL fuzz ${1%%:*} ${1##*:}${3:+: $3}" >>"$2"
	echo "$1" >>"$out/failed"
	return 1
}

fuzz() {
	local pkg=${1%%:*} name=${1##*:} log=$2 list
	echo "fuzz $pkg $name ($FUZZTIME)" >"$log"
	[ -x "${bin[$pkg]}" ] || { failed "$1" "$log" "its package did not build"; return; }
	# Listed whole before it is searched: grep -q ending the pipe at the
	# first match would fail the listing (SIGPIPE, with pipefail).
	list=$("${bin[$pkg]}" -test.list='^Fuzz' 2>&1) ||
		{ failed "$1" "$log" "its binary could not list its fuzz tests: $list"; return; }
	grep -qx "$name" <<<"$list" || { failed "$1" "$log" "the package has no fuzz test $name"; return; }
	run "$pkg" "$name" >>"$log" && return
	if ! grep -q "Failing input written" "$log"; then
		echo "fuzz $pkg $name: the harness failed without a finding; running it again" >>"$log"
		run "$pkg" "$name" >>"$log" && return
	fi
	failed "$1" "$log"
}

failed=0 start=$SECONDS
pool 1 build "${order[0]}" || failed=1
pool "$BUILDJOBS" build "${order[@]:1}" || failed=1
echo "fuzz: ${#pkgs[@]} test binaries built in $((SECONDS - start))s, the first alone, then $BUILDJOBS at a time"
start=$SECONDS
pool "$JOBS" fuzz "$@" || failed=1
echo "fuzz: $# targets run in $((SECONDS - start))s, $JOBS at a time"
if [ -s "$out/failed" ]; then
	echo "fuzz: failed:"
	sed 's/^/  /' "$out/failed"
fi
exit $failed
