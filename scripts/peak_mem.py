#!/usr/bin/env python3
"""Run a command and report its wall time and peak memory, sampled from /proc every 0.1 s:
anonymous memory (RssAnon: what the process itself allocated, the issue-16 bars' measure) and the
whole resident set (VmHWM, the kernel's own high-water mark, file-backed pages included); the JSON
also holds RssAnon once a second (anon_timeline_s_gb), to see where in the run the peak falls.

  python3 scripts/peak_mem.py [--json OUT] -- COMMAND ARGS...

Standard library only. Prints one line: `wall_s peak_anon_GB peak_rss_GB rc`.
"""
import json
import subprocess
import sys
import time


def status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def main():
    args = sys.argv[1:]
    jpath = None
    if args[:1] == ["--json"]:
        jpath, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit("usage: peak_mem.py [--json OUT] -- COMMAND ARGS...")
    t0 = time.monotonic()
    p = subprocess.Popen(args)
    anon = hwm = 0
    timeline = []  # (s, RssAnon GB) once a second: where in the run the peak falls
    while p.poll() is None:
        s = status(p.pid)
        anon = max(anon, s.get("RssAnon", 0))
        hwm = max(hwm, s.get("VmHWM", 0))
        t = time.monotonic() - t0
        if not timeline or t - timeline[-1][0] >= 1:
            timeline.append((round(t, 1), round(s.get("RssAnon", 0) / 1e9, 3)))
        time.sleep(0.1)
    wall = time.monotonic() - t0
    r = {"cmd": args, "wall_s": round(wall, 2), "peak_anon_bytes": anon, "peak_rss_bytes": hwm, "rc": p.returncode,
         "anon_timeline_s_gb": timeline}
    print(f"{wall:.1f} s, peak anon {anon / 1e9:.3f} GB, peak RSS {hwm / 1e9:.3f} GB, rc {p.returncode}", file=sys.stderr)
    if jpath:
        with open(jpath, "w") as f:
            json.dump(r, f, indent=1)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
