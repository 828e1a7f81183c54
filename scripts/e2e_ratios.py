#!/usr/bin/env python3
"""Paired wall-time ratios from a device_e2e.sh times.txt ("THREADS NAME ROUND SECONDS" lines).

For each pair A/B: the ratio B_time / A_time round by round (how many times faster A is), and
its median; the median of each command's times beside it.
  python3 scripts/e2e_ratios.py results/e2e_xeon/run3_24chunks_times.txt ours-w8a8:ours-f32 ...
"""
import statistics
import sys
from collections import defaultdict


def main():
    times = defaultdict(dict)  # (threads, name) -> round -> seconds
    for line in open(sys.argv[1]):
        th, name, rnd, sec = line.split()
        times[(th, name)][int(rnd)] = float(sec)
    for th in sorted({k[0] for k in times}, key=int):
        print(f"threads {th}")
        for (t, name), r in sorted(times.items()):
            if t == th:
                print(f"  {name:12s} median {statistics.median(r.values()):7.3f} s over {len(r)} rounds")
        for pair in sys.argv[2:]:
            a, b = pair.split(":")
            ra, rb = times.get((th, a)), times.get((th, b))
            if not ra or not rb:
                continue
            x = [rb[k] / ra[k] for k in sorted(ra) if k in rb]
            print(f"  {a} vs {b}: {statistics.median(x):.2f}x faster (rounds: {', '.join(f'{v:.2f}' for v in x)})")


if __name__ == "__main__":
    main()
