#!/usr/bin/env python3
"""Per-point tables of a sweep's result files, for a results README.

For each point: every router over the repetitions (mean and median p99
TTFT, mean TTFT, hit rate, goodput, and where the runs have them: exact
predictions, follow-up turns kept on their replica, the share of requests
sent to a replica with more waiting than the least busy one and by how many
on average, the estimates' mean error), then repetition by repetition (the
same requests at the same times) every router's p99 TTFT and goodput, and
each router's p99 over the base router's.

A router is the run's policy, a peer's router name, and "+variant" for a
variant. Usage, from the repository root:
  python3 bench/summarize.py DIR [--base cost_model] [--order a,b,c]
"""
import argparse
import glob
import json
import os
import statistics as st


def label(spec):
    pol = spec['policy']
    lab = pol.split(':')[1] if pol.startswith('peer:') else pol
    return lab + ('+' + spec['variant'] if spec.get('variant') else '')


def load(d):
    cells = {}
    for f in sorted(glob.glob(os.path.join(d, '*.json'))):
        r = json.load(open(f))
        s, m = r.get('spec', {}), r.get('measurements', {})
        if 'workload' not in s:
            continue
        pr, h, e = m.get('prediction') or {}, m.get('herding') or {}, m.get('estimate') or {}
        # A point may run at several rates; each is its own table.
        w = s['workload']
        key = (s['point'], w.get('Rate') or w.get('RateMultiplier') or 0)
        cells.setdefault(key, {}).setdefault(label(s), {})[s['rep']] = {
            'p99': m['ttft']['p99_seconds'] * 1e3, 'mean': m['ttft']['mean_seconds'] * 1e3,
            'hit': m['hit_rate'], 'good': m['goodput_rps'],
            'exact': None if pr.get('exact') is None else pr['exact'] * 100,
            'kept': (m.get('turns') or {}).get('kept_share'),
            'piled': h.get('piled_waiting'), 'excess': h.get('mean_excess_waiting'),
            'est': e.get('mean'), 'others': r['machine']['others_cpu_share']}
    return cells


# The per-router columns: heading, field, format. Optional ones are left
# out of a point's table when no run there has them.
COLUMNS = [
    ('mean TTFT ms', 'mean', '%.0f', False),
    ('hit rate', 'hit', '%.3f', False),
    ('goodput req/s', 'good', '%.2f', False),
    ('exact predictions %', 'exact', '%.1f', True),
    ('turns kept', 'kept', '%.2f', True),
    ('sent to more waiting', 'piled', '%.2f', True),
    ('waiting excess', 'excess', '%.2f', True),
    ('estimate error', 'est', '%+.2f', True),
    ("others' CPU", 'others', '%.2f', False),
]


def mean_of(rs, key, f):
    xs = [r[key] for r in rs if r[key] is not None]
    return '–' if not xs else f % st.mean(xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('dir')
    ap.add_argument('--base', default='cost_model', help='the router each p99 is divided by')
    ap.add_argument('--order', default='', help='routers first, in this order (comma-separated)')
    a = ap.parse_args()
    first = [x for x in a.order.split(',') if x]
    for (point, rate), c in sorted(load(a.dir).items()):
        labels = [x for x in first if x in c] + sorted(x for x in c if x not in first)
        runs = [r for lab in labels for r in c[lab].values()]
        cols = [col for col in COLUMNS if not col[3] or any(r[col[1]] is not None for r in runs)]
        print(f'\n### {point} at {rate:g} req/s\n')
        print('| router | runs | p99 TTFT mean (median) ms | ' + ' | '.join(col[0] for col in cols) + ' |')
        print('|---|--:|--:|' + '--:|' * len(cols))
        for lab in labels:
            rs = list(c[lab].values())
            p99 = [r['p99'] for r in rs]
            print(f'| {lab} | {len(rs)} | {st.mean(p99):,.0f} ({st.median(p99):,.0f}) | '
                  + ' | '.join(mean_of(rs, col[1], col[2]) for col in cols) + ' |')
        reps = sorted(set.intersection(*(set(c[lab]) for lab in labels)))
        others = [lab for lab in labels if lab != a.base] if a.base in c else []
        print('\n| rep | ' + ' | '.join(f'{lab} p99 (goodput)' for lab in labels)
              + ''.join(f' | {lab} / {a.base}' for lab in others) + ' |')
        print('|--:|' + '--:|' * (len(labels) + len(others)))
        for k in reps:
            row = [f"{c[lab][k]['p99']:,.0f} ({c[lab][k]['good']:.2f})" for lab in labels]
            row += [f"{c[lab][k]['p99'] / c[a.base][k]['p99']:.2f}" for lab in others]
            print(f'| {k} | ' + ' | '.join(row) + ' |')


if __name__ == '__main__':
    main()
