#!/bin/bash
# One point (by default W1 at 6 req/s with 32 system prompts; WORKLOAD,
# RATE and WORKLOAD_ARGS change it; 60 s, 10 s warmup) through a gateway
# started with the given config, in front of three default-latency
# simulators on ports 18001-18003; prints the run's summary and the
# gateway's guard and steering counters.
#   make build && bench/experiments/kv-guard/run.sh bench/experiments/kv-guard/cost_model.yaml /tmp/kv-guard/cost_model
#   WORKLOAD=w2 RATE=12 WORKLOAD_ARGS= bench/experiments/kv-guard/run.sh CONFIG OUTDIR
set -eu
cfg=$1 out=$2
workload=${WORKLOAD:-w1} rate=${RATE:-6} args=${WORKLOAD_ARGS---system-prompts 32}
bin=$(cd "$(dirname "$0")/../../.." && pwd)/bin
mkdir -p "$out"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for port in 18001 18002 18003; do
  "$bin/inferrail-sim" --port $port --served-model-name inferrail/sim-8b --enable-prompt-tokens-details >/dev/null 2>&1 &
  pids+=($!)
done
sleep 1
"$bin/inferrail-gateway" --config "$cfg" >"$out/gateway.log" 2>&1 &
pids+=($!)
sleep 2
# shellcheck disable=SC2086 # args are words on purpose
"$bin/inferrail-bench" run --url http://127.0.0.1:18080 --workload "$workload" --rate "$rate" --duration 60s \
  $args --warmup 10s --out "$out" 2>&1 | grep -E 'TTFT|hit rate|replicas|predictions'
curl -s 127.0.0.1:19090/metrics | grep -E '^inferrail_routing_(guards|steered)_total' || true
