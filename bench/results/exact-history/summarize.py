#!/usr/bin/env python3
"""Tables of README.md from the result files of bench/sweeps/exact-history.toml:
per point, each router over the repetitions (mean and median p99 TTFT, hit
rate, goodput, exact predictions), then, repetition by repetition (the same
requests at the same times), cost_model against the best peer and history
affinity against cost_model. Usage, from the repository root:
  python3 bench/results/exact-history/summarize.py bench/results/exact-history
"""
import glob
import json
import os
import statistics as st
import sys

ORDER = ['cost_model', 'cost_model+history', 'vllm-router', 'sglang-router']


def load(d):
    cells = {}
    for f in sorted(glob.glob(os.path.join(d, '*.json'))):
        r = json.load(open(f))
        s, m = r.get('spec', {}), r.get('measurements', {})
        if 'workload' not in s:
            continue
        pol = s['policy']
        label = pol.split(':')[1] if pol.startswith('peer:') else pol
        if s.get('variant'):
            label += '+' + s['variant']
        pr = m.get('prediction') or {}
        cells.setdefault(s['point'], {}).setdefault(label, {})[s['rep']] = dict(
            p99=m['ttft']['p99_seconds'] * 1e3, mean=m['ttft']['mean_seconds'] * 1e3,
            hit=m['hit_rate'], good=m['goodput_rps'],
            exact=None if pr.get('exact') is None else pr['exact'] * 100,
            kept=(m.get('turns') or {}).get('kept_share'),
            others=r['machine']['others_cpu_share'])
    return cells


def fmt(xs, f):
    xs = [x for x in xs if x is not None]
    return '–' if not xs else f % st.mean(xs)


def main():
    cells = load(sys.argv[1] if len(sys.argv) > 1 else 'bench/results/exact-history')
    for point in sorted(cells):
        c = cells[point]
        print(f'\n### {point}\n')
        print('| router | runs | p99 TTFT mean (median) ms | mean TTFT ms | hit rate | goodput req/s | exact predictions % | turns kept | others\' CPU |')
        print('|---|--:|--:|--:|--:|--:|--:|--:|--:|')
        for lab in ORDER:
            if lab not in c:
                continue
            rs = list(c[lab].values())
            p99 = [r['p99'] for r in rs]
            print(f"| {lab} | {len(rs)} | {st.mean(p99):,.0f} ({st.median(p99):,.0f}) | {fmt([r['mean'] for r in rs], '%.0f')} | "
                  f"{fmt([r['hit'] for r in rs], '%.3f')} | {fmt([r['good'] for r in rs], '%.2f')} | {fmt([r['exact'] for r in rs], '%.1f')} | "
                  f"{fmt([r['kept'] for r in rs], '%.2f')} | {fmt([r['others'] for r in rs], '%.2f')} |")
        reps = sorted(set.intersection(*(set(c[lab]) for lab in ORDER if lab in c)))
        print('\n| rep | cost_model p99 | +history p99 | vllm-router | sglang-router | cost_model / best peer | history / cost_model | hit cost_model / +history / best peer\'s |')
        print('|--:|--:|--:|--:|--:|--:|--:|---|')
        for k in reps:
            g = {lab: c[lab][k] for lab in ORDER if lab in c}
            peer = min(('vllm-router', 'sglang-router'), key=lambda lab: g[lab]['p99'])
            cm, hi = g['cost_model'], g['cost_model+history']
            print(f"| {k} | {cm['p99']:,.0f} | {hi['p99']:,.0f} | {g['vllm-router']['p99']:,.0f} | {g['sglang-router']['p99']:,.0f} | "
                  f"{cm['p99'] / g[peer]['p99']:.2f} | {hi['p99'] / cm['p99']:.2f} | {cm['hit']:.3f} / {hi['hit']:.3f} / {g[peer]['hit']:.3f} |")


if __name__ == '__main__':
    main()
