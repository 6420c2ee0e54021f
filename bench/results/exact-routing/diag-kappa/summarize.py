#!/usr/bin/env python3
"""Table of the kappa diagnostic (run.sh): each run's figures, the gateway's
guard counters where guards.txt beside the result file has them (its
/metrics, last scrape before the run ended, warmup included), then paired
comparisons. From the repository root:
  python3 bench/results/exact-routing/diag-kappa/summarize.py
"""
import glob
import json
import os
import re
import statistics as st

BASE = 'bench/results/exact-routing/diag-kappa'
VARIANTS = ['kappa0.92', 'kappa1', 'sglang-router']
rows = {}
print('| pass | seed | router | TTFT p50, ms | TTFT p99, ms | hit rate | goodput, req/s | prediction exact | KV-pressure guard / waived / decisions | others\' CPU |')
print('|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|')
for f in sorted(glob.glob(BASE + '/pass*/seed*/*/*.json')):
    p, s, v = re.search(r'pass(\d+)/seed(\d+)/([^/]+)/', f).groups()
    d = json.load(open(f))
    m = d['measurements']
    pr = m.get('prediction') or {}
    g = '–'
    gf = os.path.join(os.path.dirname(f), 'guards.txt')
    if os.path.exists(gf):
        t = open(gf).read()
        kp = re.search(r'guard="kv_pressure".*\} (\d+)', t).group(1)
        kw = re.search(r'guard="kv_waived".*\} (\d+)', t).group(1)
        dec = sum(int(x) for x in re.findall(r'^inferrail_routing_decisions_total\{.*\} (\d+)', t, re.M))
        g = f'{kp} / {kw} / {dec}'
    label = {'kappa0.92': 'cost_model exact, κ 0.92', 'kappa1': 'cost_model exact, κ 1'}.get(v, v)
    rows[(int(p), int(s), v)] = (m['ttft']['p99_seconds'] * 1e3, m['hit_rate'])
    ex = f"{pr['exact'] * 100:.1f}%" if pr.get('exact') is not None else '–'
    print(f"| {p} | {s} | {label} | {m['ttft']['p50_seconds'] * 1e3:,.0f} | {m['ttft']['p99_seconds'] * 1e3:,.0f} "
          f"| {m['hit_rate']:.3f} | {m['goodput_rps']:.2f} | {ex} | {g} | {d['machine']['others_cpu_share']:.2f} |")
print()
for v in VARIANTS:
    xs = [rows[k] for k in rows if k[2] == v]
    print(f'- {v}: {len(xs)} runs, p99 mean {st.mean(x[0] for x in xs):,.0f} ms, median {st.median(x[0] for x in xs):,.0f}; '
          f'hit rate mean {st.mean(x[1] for x in xs):.3f}')
keys = sorted({k[:2] for k in rows})
for a, b in [('kappa1', 'kappa0.92'), ('kappa1', 'sglang-router'), ('kappa0.92', 'sglang-router')]:
    r = [rows[k + (a,)][0] / rows[k + (b,)][0] for k in keys]
    h = [rows[k + (a,)][1] - rows[k + (b,)][1] for k in keys]
    print(f'- {a} against {b}, paired: p99 at or below in {sum(x <= 1 for x in r)}/{len(r)}, ratio median {st.median(r):.2f}, '
          f'geometric mean {st.geometric_mean(r):.2f}; hit rate {st.mean(h):+.3f} on average, higher in {sum(x > 0 for x in h)}/{len(h)}')
