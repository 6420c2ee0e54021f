#!/bin/bash
# One point through a gateway started with the given config (see
# ../point.sh for the point and its variables; THIRD_ARGS="--prefill-token-us
# 300 --prefill-fixed-ms 15" makes the third engine three times slower at
# prefill than the cost model is told); prints the run's summary and the
# gateway's paces.
#   make build && bench/experiments/pace/run.sh bench/experiments/pace/pace.yaml /tmp/pace/on
METRICS='^inferrail_replica_pace' exec "$(dirname "$0")/../point.sh" "$@"
