#!/bin/bash
# One open-loop point through a gateway started with the given config, in
# front of three default-latency simulators on ports 18001-18003 (the
# config's replicas); the experiments' run.sh scripts call it. By default
# W1 at 6 req/s with 32 system prompts for 60 s after 10 s of warmup;
# WORKLOAD, RATE and WORKLOAD_ARGS change the point, THIRD_ARGS adds
# simulator flags to the third engine only (say "--prefill-token-us 300"
# for an engine slower than the cost model is told), and METRICS is an
# extended regex of the gateway's metric lines to print after the run's
# summary.
#   point.sh CONFIG OUTDIR
set -eu
cfg=$1 out=$2
workload=${WORKLOAD:-w1} rate=${RATE:-6} args=${WORKLOAD_ARGS---system-prompts 32} third=${THIRD_ARGS:-}
bin=$(cd "$(dirname "$0")/../.." && pwd)/bin
mkdir -p "$out"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for port in 18001 18002 18003; do
  extra=()
  if [ "$port" = 18003 ] && [ -n "$third" ]; then
    # shellcheck disable=SC2206 # words on purpose
    extra=($third)
  fi
  # The tool flags let W3 through: vLLM refuses its tools without them.
  "$bin/inferrail-sim" --port $port --served-model-name inferrail/sim-8b --enable-prompt-tokens-details \
    --enable-auto-tool-choice --tool-call-parser hermes "${extra[@]}" >/dev/null 2>&1 &
  pids+=($!)
done
sleep 1
"$bin/inferrail-gateway" --config "$cfg" >"$out/gateway.log" 2>&1 &
pids+=($!)
sleep 2
# shellcheck disable=SC2086 # args are words on purpose
"$bin/inferrail-bench" run --url http://127.0.0.1:18080 --workload "$workload" --rate "$rate" --duration 60s \
  $args --warmup 10s --out "$out" 2>&1 | grep -E 'TTFT|hit rate|replicas|predictions|estimate'
if [ -n "${METRICS:-}" ]; then
  curl -s 127.0.0.1:19090/metrics | grep -E "$METRICS" || true
fi
