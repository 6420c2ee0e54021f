#!/usr/bin/env bash
# Diagnostic: on W2 at 12 req/s (exact.toml's settings), cost_model with the
# exact index as configured (kappa 0.92) and with the KV-pressure guard off
# (kappa 1, through gateway-kappa1.sh), beside sglang-router, interleaved per
# seed, passes FIRST (default 1) to PASSES (default 2). Run from the
# repository root after `make build`.
set -euo pipefail
out=bench/results/exact-routing/diag-kappa
common=(--workload w2 --rate 12 --duration 60s --warmup 10s --speedup 4)
for pass in $(seq "${FIRST:-1}" "${PASSES:-2}"); do
  for seed in 1 2 3; do
    nice -n 19 ./bin/inferrail-bench run "${common[@]}" --seed "$seed" --policy cost_model --index exact \
      --out "$out/pass$pass/seed$seed/kappa0.92"
    nice -n 19 ./bin/inferrail-bench run "${common[@]}" --seed "$seed" --policy cost_model --index exact \
      --gateway-binary "$out/gateway-kappa1.sh" --out "$out/pass$pass/seed$seed/kappa1"
    nice -n 19 ./bin/inferrail-bench run "${common[@]}" --seed "$seed" --policy peer:sglang-router:cache_aware \
      --out "$out/pass$pass/seed$seed/sglang-router"
  done
done
