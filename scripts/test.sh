#!/usr/bin/env bash
# make test: every check, in order, with the time each step took and the total at the end.
# The steps are make targets (see the Makefile). The two downloads that need the network rather
# than the CPU, the pinned tokenizer files and the Python venv of the end-to-end suite, run in the
# background while lint compiles, and are waited for before the first step that reads them.
#
# The race step leaves a core idle for long stretches (tests that wait on processes and sockets,
# and its last package running alone), so the steps without the detector, which reuse lint's
# build, run beside it; their output is held and printed, whole, when they end.
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
	# Nothing is left running: a failure waits for the downloads and the steps beside race to end
	# (and shows what those printed).
	[[ -n ${setup_pid:-} ]] && wait "$setup_pid" 2>/dev/null
	if ((${#beside_pids[@]} > 0)) && [[ -z ${beside_joined:-} ]]; then
		beside_joined=1
		joined || ((status != 0)) || status=1
	fi
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

beside_names=() beside_pids=() beside_logs=()
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

# beside NAME CMD...: starts CMD in the background, its output held in a log; its time is
# recorded, as a step's, by joined.
beside() {
	local name=$1 log=.cache/test-$1.log
	shift
	(
		began=$SECONDS
		"$@" >"$log" 2>&1
		rc=$?
		echo "$((SECONDS - began))" >"$log.time"
		exit "$rc"
	) &
	beside_names+=("$name") beside_pids+=($!) beside_logs+=("$log")
}

# joined waits for every step started by beside, prints each one's output and time, and
# fails if any failed.
joined() {
	local i rc failed=0
	beside_joined=1
	for i in "${!beside_pids[@]}"; do
		rc=0
		wait "${beside_pids[$i]}" || rc=$?
		echo "== ${beside_names[$i]} (beside race)"
		cat "${beside_logs[$i]}"
		times+=("${beside_names[$i]} $(cat "${beside_logs[$i]}.time" 2>/dev/null || echo '?')s")
		if ((rc != 0)); then
			echo "make test: step ${beside_names[$i]} failed (status $rc)" >&2
			failed=$rc
		fi
	done
	return "$failed"
}

step lint "$make" --no-print-directory lint
step setup setup
# One after the other, beside the race step: the end-to-end suite starts its own processes and
# both are light next to the detector's build.
beside norace-e2e bash -c "$make --no-print-directory norace && $make --no-print-directory e2e-python"
step race "$make" --no-print-directory race
step beside-wait joined
finish 0
