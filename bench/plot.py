#!/usr/bin/env python3
"""Plots throughput and PUBACK p99 over a run from `fleetwire bench --json` reports.

    python3 bench/plot.py OUT.png REPORT.json [REPORT.json ...]

Each report is one line pair (acknowledged messages/s on the left axis, p99 latency on the right), so
several runs (e.g. Fleetwire, the null server, mosquitto) compare on one picture. Needs matplotlib
(`bench/requirements.txt`; bench/plot.sh installs it into .venv-bench).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(report):
    points = [s for s in report["timeline"] if s.get("load_s") is not None]
    t = [s["load_s"] for s in points]
    rate = [s["acked_per_s"] / 1000.0 for s in points]
    p99 = [s["p99_ms"] for s in points]
    return t, rate, p99


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out, paths = argv[1], argv[2:]
    fig, rate_ax = plt.subplots(figsize=(10, 5), dpi=120)
    p99_ax = rate_ax.twinx()
    for i, path in enumerate(paths):
        with open(path) as f:
            report = json.load(f)
        t, rate, p99 = series(report)
        label = report["scenario"].get("name") or path
        if len(paths) > 1:
            label = f"{label} ({path.rsplit('/', 1)[-1]})"
        color = f"C{i}"
        rate_ax.plot(t, rate, color=color, label=f"{label}: msg/s")
        p99_ax.plot(t, p99, color=color, linestyle="--", label=f"{label}: p99")
    rate_ax.set_xlabel("seconds since the load started")
    rate_ax.set_ylabel("acknowledged messages/s (thousands), solid")
    p99_ax.set_ylabel("PUBACK p99 (ms), dashed")
    rate_ax.set_ylim(bottom=0)
    p99_ax.set_ylim(bottom=0)
    rate_ax.grid(True, alpha=0.3)
    lines = rate_ax.get_legend_handles_labels()
    dashed = p99_ax.get_legend_handles_labels()
    rate_ax.legend(lines[0] + dashed[0], lines[1] + dashed[1], loc="lower right", fontsize=8)
    rate_ax.set_title("fleetwire bench: throughput and p99 over the run")
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv)
