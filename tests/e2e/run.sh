#!/usr/bin/env bash
# End-to-end tests with the official OpenAI Python SDK against the real binaries: one
# inferrail-sim on its own and inferrail-gateway in front of three more, every process on a
# loopback port the kernel picked. The SDK and pytest come from .venv/e2e, which this script
# builds from requirements.txt (pinned by hash) on first use and rebuilds only when that file
# changes. Every process it starts is stopped when it exits, whatever the outcome.
#
# Usage:
#   tests/e2e/run.sh [pytest args...]          the suite (make e2e-python, part of make test)
#   tests/e2e/run.sh --stress [--out DIR]      1,000 concurrent streams through the gateway, then
#                                              straight to one simulator (make stress); --out
#                                              writes DIR/sdk-streams.json and sdk-streams-direct.json
#   tests/e2e/run.sh --venv                    only (re)build .venv/e2e, no binaries, no tests
#                                              (make test does it while other steps run)
# Environment: PYTHON (default python3, 3.11 to 3.13), GO (default go), E2E_BUILD=0 to use the
# binaries already in bin/ instead of building them.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/e2e
cd "$root"

mode=suite
out=
if [[ ${1:-} == --venv ]]; then
	mode=venv
elif [[ ${1:-} == --stress ]]; then
	mode=stress
	shift
	if [[ ${1:-} == --out ]]; then
		[[ -n ${2:-} ]] || { echo "e2e: --out needs a directory" >&2; exit 2; }
		out=$(mkdir -p "$2" && cd "$2" && pwd)
		shift 2
	fi
fi

die() { echo "e2e: $*" >&2; exit 1; }

# The binaries: go build is incremental, so this costs little when nothing changed. No
# -trimpath here (make build has it): that flag changes every package's build key, so in make
# test it compiled every dependency a second time instead of reusing what go vet compiled.
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3} CGO_ENABLED=${CGO_ENABLED:-0}
if [[ ${E2E_BUILD:-1} != 0 && $mode != venv ]]; then
	mkdir -p bin
	"${GO:-go}" build -o bin/ ./cmd/inferrail-sim ./cmd/inferrail-gateway ./cmd/inferrail-bench
fi

# The venv, stamped with the sha256 of the requirements it was built from.
venv=$root/.venv/e2e
py=$venv/bin/python
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [[ "$(cat "$venv/requirements.sha256" 2>/dev/null)" != "$want" ]] || ! "$py" -c '' 2>/dev/null; then
	started=$SECONDS
	echo "e2e: creating .venv/e2e"
	rm -rf "$venv"
	"${PYTHON:-python3}" -m venv "$venv"
	"$py" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$here/requirements.txt"
	echo "$want" >"$venv/requirements.sha256"
	echo "e2e: .venv/e2e ready in $((SECONDS - started)) s"
fi
[[ $mode == venv ]] && exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/inferrail-e2e.XXXXXX")
pids=()

# stop ends every child: SIGTERM, up to 10 s for all of them together, then SIGKILL.
stop() {
	local pid deadline=$((SECONDS + 10))
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
		if kill -0 "$pid" 2>/dev/null; then
			echo "e2e: pid $pid ignored SIGTERM for 10 s; killing it" >&2
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	wait 2>/dev/null || true
	pids=()
}

pytest_pid=
cleanup() {
	local status=$?
	trap - EXIT INT TERM HUP
	if [[ -n $pytest_pid ]]; then
		kill -TERM "$pytest_pid" 2>/dev/null || true
		wait "$pytest_pid" 2>/dev/null || true
	fi
	stop
	if ((status != 0)); then
		local log
		for log in "$work"/*.log; do
			[[ -f $log ]] || continue
			echo "--- last lines of $(basename "$log") ---" >&2
			tail -n 15 "$log" >&2
		done
		echo "e2e: failed (status $status); logs kept in $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# With setpriv, a child also gets SIGTERM if this script is killed outright (SIGKILL),
# when no trap can run.
lifeline=()
if command -v setpriv >/dev/null; then lifeline=(setpriv --pdeathsig TERM --); fi

# listen_addr LOG MSG KEY PID prints the address the process PID logged as KEY=host:port
# on its MSG line, once it has.
listen_addr() {
	local log=$1 msg=$2 key=$3 pid=$4 addr deadline=$((SECONDS + 15))
	while ((SECONDS < deadline)); do
		addr=$(sed -n "s/.*msg=\"$msg\".* $key=\\([^ ]*\\).*/\\1/p" "$log" | head -n 1)
		if [[ -n $addr ]]; then
			echo "$addr"
			return
		fi
		kill -0 "$pid" 2>/dev/null || die "$(basename "$log" .log) exited before listening: $(tail -n 5 "$log")"
		sleep 0.02
	done
	die "$(basename "$log" .log) did not log \"$msg\" within 15 s"
}

# The simulators: builtin:sim is their only tokenizer and prefix caching is on by default.
# The suite shortens the decode step (2 ms instead of 20) so replies of a few hundred tokens
# stay quick; the stress run keeps the default latency model.
sim_args=(--host 127.0.0.1 --port 0 --enable-prompt-tokens-details)
replica_cap=256
if [[ $mode == suite ]]; then
	sim_args+=(--decode-token-ms 2)
else
	replica_cap=1024 # 1,000 streams in flight must fit the gateway's breakers
fi

start_sim() {
	local name=$1
	"${lifeline[@]}" bin/inferrail-sim "${sim_args[@]}" >"$work/$name.log" 2>&1 &
	pids+=($!)
}

names=(sim-1 sim-2 sim-3 sim-solo)
for name in "${names[@]}"; do start_sim "$name"; done
declare -A addr
i=0
for name in "${names[@]}"; do
	addr[$name]=$(listen_addr "$work/$name.log" "inferrail-sim listening" addr "${pids[$i]}")
	i=$((i + 1))
done

config=$work/gateway.yaml
{
	cat <<EOF
server:
  listen: 127.0.0.1:0
  admin_listen: 127.0.0.1:0
  shutdown_timeout: 2s
models:
  - name: inferrail/sim-8b
    aliases: [sim]
    policy: round_robin
    tokenizer: builtin:sim
routing:
  seed: 1
replicas:
EOF
	for name in sim-1 sim-2 sim-3; do
		cat <<EOF
  - id: $name
    url: http://${addr[$name]}
    models: [inferrail/sim-8b]
    max_concurrency: $replica_cap
    max_pending: $replica_cap
EOF
	done
} >"$config"

"${lifeline[@]}" bin/inferrail-gateway --config "$config" >"$work/gateway.log" 2>&1 &
pids+=($!)
gateway=$(listen_addr "$work/gateway.log" "inferrail-gateway listening" client $!)
admin=$(listen_addr "$work/gateway.log" "inferrail-gateway listening" admin $!)

export E2E_GATEWAY_URL=http://$gateway E2E_GATEWAY_ADMIN_URL=http://$admin
E2E_REPLICAS=
for name in sim-1 sim-2 sim-3; do E2E_REPLICAS+="${E2E_REPLICAS:+,}$name=http://${addr[$name]}"; done
export E2E_REPLICAS
export E2E_SIM_URL=http://${addr[sim-solo]}
export E2E_STRESS_OUT=$out
export E2E_BIN_DIR=$root/bin # test_kv_events.py starts simulators of its own from here
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in the work tree

args=(-c "$here/pytest.ini" -p no:cacheprovider)
if [[ $mode == suite ]]; then
	args+=(-m "not stress" "$@" "$here")
else
	args+=(-m stress -s "$@" "$here")
fi
# In the background, so that a signal to this script runs its trap at once instead of after
# pytest ends (bash defers traps while a foreground child runs); cleanup stops pytest first.
"${lifeline[@]}" "$py" -m pytest "${args[@]}" &
pytest_pid=$!
wait "$pytest_pid"
pytest_pid=
