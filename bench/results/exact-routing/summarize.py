#!/usr/bin/env python3
"""Tables of README.md from the result files: every run of each router pooled
over the passes given (directories of one sweep of bench/sweeps/exact.toml
each), then p99 TTFT per pass and seed, then paired comparisons (same pass,
same seed). Usage, from the repository root:
  python3 bench/results/exact-routing/summarize.py bench/results/exact-routing \
      bench/results/exact-routing/pass2 bench/results/exact-routing/pass3
"""
import glob
import json
import os
import statistics as st
import sys

ORDER = ['cost_model exact', 'cost_model approximate', 'kv_aware exact',
         'kv_aware approximate', 'vllm-router', 'sglang-router']


def load(dirs):
    cells = {}
    for pi, d in enumerate(dirs, 1):
        for f in sorted(glob.glob(os.path.join(d, '*.json'))):
            r = json.load(open(f))
            s, m = r.get('spec', {}), r.get('measurements', {})
            if 'workload' not in s:
                continue
            pol = s['policy']
            label = pol.split(':')[1] if pol.startswith('peer:') else f"{pol} {s.get('index') or 'approximate'}"
            pr = m.get('prediction') or {}
            cells.setdefault(s['point'], {}).setdefault(label, {})[(pi, s['rep'])] = dict(
                p50=m['ttft']['p50_seconds'] * 1e3, p99=m['ttft']['p99_seconds'] * 1e3,
                hit=m['hit_rate'], good=m['goodput_rps'], busiest=m['busiest_share'],
                exact=None if pr.get('exact') is None else pr['exact'] * 100,
                predhit=pr.get('hit_rate'), over=pr.get('over'),
                lag99=m['send_lag']['p99_seconds'] * 1e3, tpot50=m['tpot']['p50_seconds'] * 1e3,
                others=r['machine']['others_cpu_share'])
    return cells


def spread(xs, fmt):
    xs = [x for x in xs if x is not None]
    if not xs:
        return '–'
    return f"{fmt % st.mean(xs)} ({fmt % min(xs)}–{fmt % max(xs)})"


def best_peer(c, k):
    return min(c['vllm-router'][k]['p99'], c['sglang-router'][k]['p99'])


def main(dirs):
    cells = load(dirs)
    for point in [p for p in ('w2', 'hot') if p in cells]:
        c = cells[point]
        keys = sorted(next(iter(c.values())).keys())
        print(f'\n#### {point}: {len(keys)} runs per row, mean (min–max); p99 also median\n')
        print('| router | TTFT p50, ms | TTFT p99, ms | p99 median | hit rate | goodput, req/s | prediction exact | busiest share |')
        print('|---|--:|--:|--:|--:|--:|--:|--:|')
        for lab in ORDER:
            v = [c[lab][k] for k in keys]
            print(f"| {lab} | {spread([x['p50'] for x in v], '%.0f')} | {spread([x['p99'] for x in v], '%.0f')} "
                  f"| {st.median(x['p99'] for x in v):.0f} | {spread([x['hit'] for x in v], '%.3f')} "
                  f"| {spread([x['good'] for x in v], '%.2f')} | {spread([x['exact'] for x in v], '%.1f%%')} "
                  f"| {spread([x['busiest'] for x in v], '%.2f')} |")
        print(f'\np99 TTFT (ms) of each run, by pass (p) and repetition/seed (r):\n')
        print('| router | ' + ' | '.join(f'p{k[0]} r{k[1]}' for k in keys) + ' |')
        print('|---|' + '--:|' * len(keys))
        for lab in ORDER:
            print(f'| {lab} | ' + ' | '.join(f"{c[lab][k]['p99']:,.0f}" for k in keys) + ' |')
        print('| *best peer* | ' + ' | '.join(f"{best_peer(c, k):,.0f}" for k in keys) + ' |')
        print('\nPaired, same pass and seed (ratio = left p99 / right p99):\n')
        for a, b in [('cost_model exact', 'best peer'), ('cost_model exact', 'sglang-router'),
                     ('cost_model exact', 'vllm-router'), ('cost_model exact', 'cost_model approximate'),
                     ('cost_model exact', 'kv_aware exact'), ('kv_aware exact', 'best peer'),
                     ('kv_aware exact', 'kv_aware approximate')]:
            ratios = [c[a][k]['p99'] / (best_peer(c, k) if b == 'best peer' else c[b][k]['p99']) for k in keys]
            print(f'- p99 {a} at or below {b}: {sum(x <= 1 for x in ratios)}/{len(keys)}; '
                  f'ratio median {st.median(ratios):.2f}, geometric mean {st.geometric_mean(ratios):.2f}')
        for a, b in [('cost_model exact', 'cost_model approximate'), ('kv_aware exact', 'kv_aware approximate'),
                     ('cost_model exact', 'sglang-router'), ('cost_model exact', 'kv_aware exact')]:
            d = [c[a][k]['hit'] - c[b][k]['hit'] for k in keys]
            print(f'- hit rate {a} minus {b}: mean {st.mean(d):+.3f}, higher in {sum(x > 0 for x in d)}/{len(d)}')
        print('\nPredictions by seed, mean over passes (predicted hit rate on the chosen replica, '
              'actual hit rate, share exact, share over-predicted):\n')
        for lab in ORDER[:4]:
            for rep in sorted({k[1] for k in keys}):
                v = [c[lab][k] for k in keys if k[1] == rep]
                print(f"- {lab}, r{rep}: predicted {st.mean(x['predhit'] for x in v):.3f}, actual "
                      f"{st.mean(x['hit'] for x in v):.3f}, exact {st.mean(x['exact'] for x in v):.1f}%, "
                      f"over {100 * st.mean(x['over'] for x in v):.1f}%")


if __name__ == '__main__':
    main(sys.argv[1:] or ['bench/results/exact-routing'])
