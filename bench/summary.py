#!/usr/bin/env python3
"""Turns the results of bench/performance.sh into the markdown tables of docs/performance.md.

    python3 bench/summary.py target/bench/performance-<time>
"""

import glob
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=",.0f", none="-"):
    return none if x is None else format(x, spec)


def mib(b):
    return None if b is None else b / 2**20


def main(out):
    print(f"Results: `{out}`\n")

    s = load(f"{out}/compare/summary.json")
    print("### Side by side (canonical workload: 10k smart meters, QoS 1, max rate, window 8, 30 s; medians of 3)\n")
    print("| server | msg/s | runs | PUBACK p99 | server CPU |")
    print("|---|---|---|---|---|")
    for name, r in s["rows"].items():
        runs = ", ".join(fmt(x) for x in r["runs"])
        print(f"| {name} | {fmt(r['messages_per_s'])} | {runs} | {r['p99_ms']:.1f} ms | "
              f"{fmt(r['server_cpu_percent'], '.0f')}% |")
    print()
    for k, v in s["ratios"].items():
        print(f"- {k}: **{v:.2f}**")
    print()

    def rows(prefix):
        return [load(p) for p in sorted(glob.glob(f"{out}/{prefix}-[0-9].json"))]

    sus = rows("sustained")
    print("### Sustained maximum (45 s warm-up so heads fill and sealing runs, then 30 s measured)\n")
    print("| run | msg/s | data points/s | p99 | server CPU | acked points | stored | missing |")
    print("|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(sus, 1):
        v = r.get("verification") or {}
        print(f"| {i} | {fmt(r['measured']['messages_per_s'])} | {fmt(r['measured']['points_per_s'])} | "
              f"{r['latency']['p99_ms']:.0f} ms | {fmt((r.get('server') or {}).get('cpu_percent_avg'), '.0f')}% | "
              f"{fmt(v.get('acked_points'))} | {fmt(v.get('stored_points'))} | {v.get('missing_points', '-')} |")
    print(f"\nMedian: **{fmt(median([r['measured']['messages_per_s'] for r in sus]))} msg/s**\n")

    half = rows("half-load")
    print("### PUBACK latency at 50,000 msg/s (open loop, 10k devices, latency from when each message was due)\n")
    print("| run | msg/s | p50 | p95 | p99 | p99.9 | max | p99 to arrival | server CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(half, 1):
        l = r["latency"]
        # The same p99 counted to the PUBACK's arrival at the socket (reports of builds before it have none).
        arrival = (r.get("latency_arrival") or {}).get("p99_ms")
        print(f"| {i} | {fmt(r['measured']['messages_per_s'])} | {l['p50_ms']:.1f} | {l['p95_ms']:.1f} | "
              f"{l['p99_ms']:.1f} | {l['p999_ms']:.1f} | {l['max_ms']:.1f} | "
              f"{'-' if arrival is None else format(arrival, '.1f')} | "
              f"{fmt((r.get('server') or {}).get('cpu_percent_avg'), '.0f')}% |")
    print(f"\nMedian p99: **{median([r['latency']['p99_ms'] for r in half]):.1f} ms**\n")
    if os.path.exists(f"{out}/fsync-probe.json"):
        f = load(f"{out}/fsync-probe.json")
        print(f"The disk just before (`fleetwire bench fsync-probe`, {f['write_bytes']} bytes + `fdatasync` "
              f"every {f['interval_ms']:.2f} ms, {f['seconds']:.0f} s): p50 {f['p50_ms']:.2f} ms, p99 {f['p99_ms']:.2f} ms, "
              f"max {f['max_ms']:.1f} ms, {f['over_10ms']} syncs over 10 ms, {f['over_50ms']} over 50 ms.\n")

    print("### ThingsBoard's scenarios (5k smart meters, QoS 1, 10 alarm messages/s)\n")
    print("| scenario | offered | achieved | server CPU avg | RSS peak | PUBACK p50 | p99 | missing |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ("scenario-a", "scenario-b", "scenario-b-peak"):
        path = f"{out}/{name}.json"
        if not os.path.exists(path):
            continue
        r = load(path)
        srv = r.get("server") or {}
        v = r.get("verification") or {}
        print(f"| {name} | {fmt(r['scenario']['rate'])} msg/s | {fmt(r['measured']['messages_per_s'])} msg/s | "
              f"{fmt(srv.get('cpu_percent_avg'), '.0f')}% | {fmt(mib(srv.get('rss_max_bytes')), '.0f')} MiB | "
              f"{r['latency']['p50_ms']:.1f} ms | {r['latency']['p99_ms']:.1f} ms | {v.get('missing_points', '-')} |")
    print()

    if os.path.exists(f"{out}/query.json"):
        q = load(f"{out}/query.json")
        print("### Query: one day of 1 s data (86,400 points), one key, 1-minute AVG\n")
        print(f"{q['runs']} queries over one keep-alive connection: p50 **{q['p50_ms']:.2f} ms**, "
              f"p99 {q['p99_ms']:.2f} ms, max {q['max_ms']:.2f} ms ({q['buckets']} buckets).\n")

    idle = rows("idle-19k")
    print("### Memory per idle connection (19,000 devices connected, fresh server each run)\n")
    print("| run | connected | RSS before | RSS connected | per connection |")
    print("|---|---|---|---|---|")
    per = []
    for i, r in enumerate(idle, 1):
        srv = r.get("server") or {}
        conn = r["totals"]["settled"] - r["totals"]["connect_failures"] - r["totals"]["refused"]
        p = srv.get("rss_per_connection_bytes")
        per.append(p)
        print(f"| {i} | {conn} | {fmt(mib(srv.get('rss_baseline_bytes')), '.1f')} MiB | "
              f"{fmt(mib(srv.get('rss_at_go_bytes')), '.1f')} MiB | {fmt(p and p / 1000, '.2f')} KB |")
    print(f"\nMedian: **{fmt(median(per) and median(per) / 1000, '.2f')} KB per connection**\n")

    if os.path.exists(f"{out}/disk/disk.json"):
        d = load(f"{out}/disk/disk.json")
        print("### Disk per data point (100M smart-meter points, 10k devices)\n")
        print(f"{d['points']:,} points stored, {d['missing_points']} missing.\n")
        print("| when | data directory | bytes/point | tsdb bytes/point | log |")
        print("|---|---|---|---|---|")
        for state in ("running", "stopped"):
            r = d[state]
            print(f"| {state} | {r['total_bytes'] / 2**20:,.1f} MiB | {r['bytes_per_point']:.3f} | "
                  f"{r['tsdb_bytes_per_point']:.3f} | {r['log_bytes'] / 2**20:,.1f} MiB |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
