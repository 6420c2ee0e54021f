#!/usr/bin/env bash
# The quick start as one command: three simulators, the gateway in front of
# them (deploy/local.yaml), a short burst of chats, and what happened.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp -t inferrail-demo.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

for port in 8001 8002 8003; do
  bin/inferrail-sim --host 127.0.0.1 --port "$port" --enable-prompt-tokens-details 2>>"$log" &
  pids+=($!)
done
bin/inferrail-gateway --config deploy/local.yaml 2>>"$log" &
pids+=($!)

echo "three simulators on :8001-:8003, the gateway on :8080 (admin :9090); logs in $log"
if ! bin/inferrail-bench demo --gateway http://127.0.0.1:8080 --model sim; then
  echo "demo failed; the last log lines:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
