#!/usr/bin/env python3
"""Event model of the deterministic causal backward's dQ order (tile_range.h): one block per SM,
132 SMs, blocks launched in grid order onto the SM that frees first, a unit step per Q tile plus
FIXED steps a block. A block stages step t's dQ once step t-1's addition has read the staging tile
(one buffer) and adds it EPS steps after both its own compute and the preceding turn's addition.
Schemes: cur = main (walk up from the diagonal, turns descending in the key tile, launched
lightest first); B = heavy first (walk down from the last Q tile, turns ascending, launched
heaviest first: waits point to earlier blocks, no co-residency needed); nowait_* = the same walks
without turns (the launch order's list-scheduling tail alone). Prints makespan / (work / SMs).
  python3 det_order_model.py [EPS ...]"""
import argparse
import heapq
# blocks: (u, n) with walk list of Q tiles; pred(u,n,m) = key tile whose add at m precedes ours (or None)
# compute C_t >= C_{t-1}+1, C_t >= A_{t-1} (single staging buffer); A_t = max(C_t, A_pred) + eps
def run(S, units, bn, bm, scheme, sms=132, fixed=3.0, eps=0.3):
    nb, M = (S + bn - 1)//bn, S//bm
    d = lambda n: (bn*n)//bm
    if scheme == 'cur':
        walk = lambda n: list(range(d(n), M)); pred = lambda n, m: n+1 if n+1 < nb and d(n+1) <= m else None
        order = list(range(nb-1, -1, -1))
    elif scheme == 'B':
        walk = lambda n: list(range(M-1, d(n)-1, -1)); pred = lambda n, m: n-1 if n > 0 else None
        order = list(range(nb))
    elif scheme == 'nowait_asc':
        walk = lambda n: list(range(d(n), M)); pred = lambda n, m: None; order = list(range(nb))
    elif scheme == 'nowait_desc':
        walk = lambda n: list(range(d(n), M)); pred = lambda n, m: None; order = list(range(nb-1, -1, -1))
    seq = [(u, n) for u in range(units) for n in order]
    walks = {n: walk(n) for n in range(nb)}
    A = {}; waiting = {}; ev = []; cnt = [0]; nxt = [0]; end = 0.0
    total = sum(M - d(n) + fixed for n in range(nb)) * units
    def push(t, st, m):
        cnt[0] += 1; heapq.heappush(ev, (t, cnt[0], st, m))
    def begin_step(st):
        m = walks[st['n']][st['i']]
        st['C'] = max(st['C'] + 1, st['A'])
        p = pred(st['n'], m)
        if p is None: push(st['C'] + eps, st, m); return
        key = (st['u'], p, m)
        if key in A: push(max(st['C'], A[key]) + eps, st, m)
        else: waiting.setdefault(key, []).append(st)
    def launch(t):
        if nxt[0] >= len(seq): return
        u, n = seq[nxt[0]]; nxt[0] += 1
        begin_step({'u': u, 'n': n, 'i': 0, 'C': t + fixed/2 - 1, 'A': 0.0})
    for _ in range(min(sms, len(seq))): launch(0.0)
    while ev:
        a, _, st, m = heapq.heappop(ev)
        A[(st['u'], st['n'], m)] = a; st['A'] = a
        for w in waiting.pop((st['u'], st['n'], m), []):
            push(max(w['C'], a) + eps, w, m)
        st['i'] += 1
        if st['i'] < len(walks[st['n']]): begin_step(st)
        else:
            e = a + fixed/2; end = max(end, e); launch(e)
    assert nxt[0] == len(seq) and not waiting, (nxt[0], len(seq), len(waiting))
    return end / (total / sms)
if __name__ == '__main__':
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("eps", nargs="*", type=float, default=[0.3], help="an addition's latency, in steps")
  for eps in ap.parse_args().eps:
    for dd, bm, bn in [(128, 64, 128), (256, 64, 80)]:
      for s in [2048, 4096, 8192, 16384]:
        units = max(1, 16384//s) * (2048//dd)
        r = {k: run(s, units, bn, bm, k, eps=eps) for k in ('nowait_desc', 'nowait_asc', 'cur', 'B')}
        print(f"eps {eps} D{dd} S{s}: " + " ".join(f"{k} {v:.3f}" for k, v in r.items()))
