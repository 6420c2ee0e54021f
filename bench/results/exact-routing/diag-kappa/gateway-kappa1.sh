#!/usr/bin/env bash
# Diagnostic only: runs bin/inferrail-gateway with the config inferrail-bench
# wrote, except routing.kappa set to 1, so cost_model's KV-pressure guard
# never sets a replica aside. The result files of runs through this wrapper
# still record the config as written (kappa 0.92); see ../README.md.
# Usage: --gateway-binary bench/results/exact-routing/diag-kappa/gateway-kappa1.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
[[ "${1:-}" == "--config" && -n "${2:-}" ]] || { echo "gateway-kappa1: want --config PATH" >&2; exit 2; }
cfg="$2.kappa1.yaml"
sed -E 's/^( +kappa: ).*/\11/' "$2" >"$cfg"
grep -q '^ *kappa: 1$' "$cfg" || { echo "gateway-kappa1: no kappa line in $2" >&2; exit 2; }
exec "$root/bin/inferrail-gateway" --config "$cfg"
