#!/usr/bin/env bash
# make test: every check, in order, with the time each step took and the total at the end.
# The steps are make targets (see the Makefile). The two downloads that need the network rather
# than the CPU, the pinned tokenizer files and the Python venv of the end-to-end suite, run in the
# background while lint compiles, and are waited for before the first step that reads them.
#
# Fuzzing is not a step: every fuzz target's seed corpus (its f.Add seeds and testdata/fuzz,
# crashers included) runs as a test in the race step, while mutating for a few seconds more cost
# a build of every package with the fuzzer's instrumentation, about a quarter of make test on a
# fresh machine. make fuzz-smoke and make fuzz mutate.
set -uo pipefail
cd "$(dirname "$0")/.."

make=${MAKE:-make}
start=$SECONDS
times=()

finish() {
	local status=$1 verdict=passed
	# Nothing is left running: a failure waits for the downloads to end.
	[[ -n ${setup_pid:-} ]] && wait "$setup_pid" 2>/dev/null
	((status == 0)) || verdict=FAILED
	echo "make test: $verdict in $((SECONDS - start)) s (${times[*]})"
	exit "$status"
}

# step NAME CMD...: runs CMD and records how long it took; a failure ends the run.
step() {
	local name=$1 began=$SECONDS rc
	shift
	echo "== $name"
	"$@"
	rc=$?
	times+=("$name $((SECONDS - began))s")
	if ((rc != 0)); then
		echo "make test: step $name failed (status $rc)" >&2
		finish "$rc"
	fi
}

mkdir -p .cache
setup_log=.cache/test-setup.log
(./scripts/fetch-tokenizers.sh && ./tests/e2e/run.sh --venv) >"$setup_log" 2>&1 &
setup_pid=$!
# setup waits for the background downloads and shows what they printed.
setup() {
	local rc=0
	wait "$setup_pid" || rc=$?
	cat "$setup_log"
	return "$rc"
}

step lint "$make" --no-print-directory lint
step setup setup
step race "$make" --no-print-directory race
step norace "$make" --no-print-directory norace
step e2e-python "$make" --no-print-directory e2e-python
finish 0
