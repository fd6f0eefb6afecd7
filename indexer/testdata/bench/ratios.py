"""Summarise indexer benchmark output (docs/BENCHMARKS.md, "## Indexer").

usage: python3 ratios.py FILE...

For each benchmark and impl: the median of every metric over the -count
runs, and for ours the median of the per-run ratios to client-go (run i of
ours over run i of client-go, which ran just before it), their range, and
the ratio of the medians. No benchstat here; this is what the doc quotes.
"""
import re, sys, statistics, collections
occ = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for line in open(f):
        if not line.startswith('Benchmark'): continue
        parts = line.split()
        name = re.sub(r'-\d+$', '', parts[0])
        fam, impl, objs = re.match(r'Benchmark(\w+)/impl=([\w-]+)/objects=(\d+)', name).groups()
        toks = parts[2:]
        d = {toks[i+1]: float(toks[i]) for i in range(0, len(toks)-1, 2)}
        occ[(fam, objs)][impl].append(d)
def med(runs, u): return statistics.median(r[u] for r in runs)
for (fam, objs), impls in occ.items():
    base = impls['client-go']
    for impl, runs in impls.items():
        out = []
        for unit in ('ns/op', 'cpu-ns/op', 'ns/obj', 'cpu-ns/obj', 'obj/s', 'heapB/obj', 'warm-heapB/obj', 'diskB/obj', 'B/op', 'allocs/op'):
            if unit not in runs[0]: continue
            s = f"{unit}={med(runs, unit):.4g}"
            if impl != 'client-go' and unit in ('ns/op','cpu-ns/op','heapB/obj','warm-heapB/obj', 'obj/s'):
                rs = [r[unit]/b[unit] for r, b in zip(runs, base)]
                s += f" [x{statistics.median(rs):.3g} ({min(rs):.3g}..{max(rs):.3g}) ratio-of-medians {med(runs,unit)/med(base,unit):.3g}]"
            out.append(s)
        print(f"{fam:8} {objs:6} {impl:15} " + "  ".join(out))
