#!/usr/bin/env bash
# Runs each fuzz target (package:Target) for FUZZTIME, JOBS at a time (each
# with its own -parallel share of the cores), printing every target's output
# whole when it ends. A run that fails without writing a failing input is
# Go's fuzzing harness missing its own deadline on a busy machine ("context
# deadline exceeded"), not a finding: that target is run once more. A real
# finding always writes its input under testdata/fuzz and fails the run.
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
JOBS=${JOBS:-2}
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
workers=$(( cores / JOBS )); [ "$workers" -ge 1 ] || workers=1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT

one() {
	local pkg=${1%%:*} name=${1##*:} log=$2 st
	{
		echo "fuzz $pkg $name ($FUZZTIME)"
		"$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -parallel "$workers" "$pkg" 2>&1
	} >"$log"; st=$?
	if [ $st -ne 0 ] && ! grep -q "Failing input written" "$log"; then
		echo "fuzz $pkg $name: the harness failed without a finding; running it again" >>"$log"
		"$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -parallel "$workers" "$pkg" >>"$log" 2>&1; st=$?
	fi
	return $st
}

i=0 failed=0
pids=() logs=()
for t in "$@"; do
	log=$out/$i.log; i=$((i + 1))
	one "$t" "$log" & pids+=($!); logs+=("$log")
	if [ ${#pids[@]} -ge "$JOBS" ]; then
		wait "${pids[0]}" || failed=1; cat "${logs[0]}"
		pids=("${pids[@]:1}"); logs=("${logs[@]:1}")
	fi
done
for k in "${!pids[@]}"; do
	wait "${pids[$k]}" || failed=1; cat "${logs[$k]}"
done
exit $failed
