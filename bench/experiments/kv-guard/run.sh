#!/bin/bash
# One point through a gateway started with the given config (see
# ../point.sh for the point and its variables); prints the run's summary
# and the gateway's guard and steering counters.
#   make build && bench/experiments/kv-guard/run.sh bench/experiments/kv-guard/cost_model.yaml /tmp/kv-guard/cost_model
#   WORKLOAD=w2 RATE=12 WORKLOAD_ARGS= bench/experiments/kv-guard/run.sh CONFIG OUTDIR
METRICS='^inferrail_routing_(guards|steered)_total' exec "$(dirname "$0")/../point.sh" "$@"
