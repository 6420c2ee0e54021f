#!/usr/bin/env bash
# make demo: W1 (16 shared system prompts) at 5 req/s for 40 s under
# round_robin, then cost_model, each on a cold fleet of three simulators
# behind the gateway; prints the comparison and writes a chart and a report
# under bench/tmp/demo (ignored by git). Then W2 (multi-turn chats, 300
# requests) under cost_model with the gateway's index approximate, then
# exact (following every simulator's KV events), and a table of how exact
# each one's cached-token predictions were (results in bench/tmp/demo/index). Extra arguments go to
# `inferrail-bench demo` (-h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/inferrail-bench ] || make --no-print-directory build
rm -rf bench/tmp/demo
exec bin/inferrail-bench demo --out bench/tmp/demo "$@"
