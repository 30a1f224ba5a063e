#!/usr/bin/env python3
"""Plots of pstwin outputs (docs/SWEEP.md).

    pstwin_plot.py sweep DIR [--quiet]

reads DIR/sweep.csv and DIR/sweep.json (written by `pstwin sweep`) and writes, as PNG and SVG, each
measure against the first grid field, one line per combination of the other fields, the points the
mean over seeds and the error bars one standard deviation over seeds:

    iteration_time   mean iteration time (the bound dashed, in the line's colour, where one applies)
    ratio            achieved / bound (where a bound applies)
    accuracy         final test accuracy (trained workloads only)
    violations       correctness violations per run (performance: missed bounds, dashed)

The same CSV gives the same files (fixed SVG ids, no dates). Exit status 3: matplotlib is missing.
"""

import argparse
import csv
import json
import math
import os
import statistics
import sys

NO_MATPLOTLIB = 3


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def mean_spread(values):
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def axis_positions(values):
    """Numeric x positions when every value is a number (log scale for a wide positive range),
    else the values in grid order as categories."""
    numbers = [number(v) for v in values]
    if all(n is not None for n in numbers):
        positive = all(n > 0 for n in numbers)
        wide = positive and max(numbers) / min(numbers) >= 8
        return numbers, wide, False
    return list(range(len(values))), False, True


def style(index, count):
    """A colour and marker per line; past ten lines the markers keep every line distinct."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if count <= 10 else "tab20"]
    markers = "os^Dv<>PX*"
    return cmap(index % cmap.N), markers[(index // cmap.N + index) % len(markers)]


def plot_sweep(directory, quiet):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("pstwin_plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return NO_MATPLOTLIB
    plt.rcParams["svg.hashsalt"] = "pstwin"
    with open(os.path.join(directory, "sweep.json")) as f:
        meta = json.load(f)
    with open(os.path.join(directory, meta.get("csv", "sweep.csv")), newline="") as f:
        rows = list(csv.DictReader(f))
    grid = meta["grid"]
    if not grid:
        print("pstwin_plot: the sweep has no grid field to plot against", file=sys.stderr)
        return 1
    x_field = grid[0]["field"]
    x_values = grid[0]["values"]
    line_fields = [axis["field"] for axis in grid[1:]]
    # Lines in grid order: the product of the other fields' values.
    lines = [()]
    for axis in grid[1:]:
        lines = [line + (value,) for line in lines for value in axis["values"]]
    positions, log_x, categorical = axis_positions(x_values)

    def cell(line, x, column):
        values = []
        for row in rows:
            if row[x_field] != x or tuple(row[f] for f in line_fields) != line:
                continue
            v = number(row[column]) if row[column] != "" else None
            if v is not None and not math.isnan(v):
                values.append(v)
        return values

    seeds = len(meta.get("seeds", [])) or 1
    title = meta["scenario"]
    subtitle = meta.get("description", "")
    error_note = f"mean over {seeds} seeds, bars: 1 s.d." if seeds > 1 else "1 seed"

    def label(line):
        if not line:
            return None
        return ", ".join(f"{f}={v}" for f, v in zip(line_fields, line))

    def line_name(prefix, line):
        name = label(line)
        if prefix:
            return f"{prefix} ({name})" if name else prefix
        return name

    def figure(measure, ylabel, column, scale=1.0, extra=None, integer=False, prefix=""):
        if not any(cell(line, x, column) for line in lines for x in x_values):
            return None
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
        for i, line in enumerate(lines):
            colour, marker = style(i, len(lines))
            xs, ys, es = [], [], []
            for pos, x in zip(positions, x_values):
                mean, spread = mean_spread(cell(line, x, column))
                if mean is None:
                    continue
                xs.append(pos)
                ys.append(mean * scale)
                es.append(spread * scale)
            ax.errorbar(xs, ys, yerr=es if seeds > 1 else None, color=colour, marker=marker, capsize=4,
                        linewidth=1.6, label=line_name(prefix, line))
            if extra:
                extra(ax, line, colour)
        ax.set_xlabel(x_field)
        ax.set_ylabel(ylabel)
        if categorical:
            ax.set_xticks(positions, x_values)
        elif log_x:
            ax.set_xscale("log", base=2)
            ax.set_xticks(positions, x_values)
            ax.minorticks_off()
        else:
            ax.set_xticks(positions, x_values)
        if integer:
            ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        heading = f"{title}: {ylabel} vs {x_field}"
        ax.set_title(f"{heading}\n{subtitle}" if subtitle else heading, fontsize=10)
        ax.annotate(error_note, xy=(1, 0), xycoords="axes fraction", xytext=(-4, 4),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.35")
        handles, _ = ax.get_legend_handles_labels()
        if handles and any(h.get_label() and not h.get_label().startswith("_") for h in handles):
            ax.legend(fontsize=8, ncol=2 if len(handles) > 8 else 1)
        fig.tight_layout()
        written = []
        base = os.path.join(directory, measure.replace(" ", "_"))
        for ext, metadata in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
            fig.savefig(f"{base}.{ext}", metadata=metadata)
            written.append(f"{base}.{ext}")
        plt.close(fig)
        return written

    times = [number(r["iteration_mean_s"]) for r in rows if number(r["iteration_mean_s"])]
    in_ms = bool(times) and max(times) < 1
    scale, unit = (1e3, "ms") if in_ms else (1.0, "s")

    def dashed(column, name, scale=1.0, skip_zeros=False):
        """A dashed line of `column`'s mean per x, in the line's colour (the bound, missed bounds)."""

        def draw(ax, line, colour):
            points = [(pos, statistics.fmean(v) * scale) for pos, x in zip(positions, x_values)
                      if (v := cell(line, x, column))]
            if points and not (skip_zeros and not any(y for _, y in points)):
                ax.plot(*zip(*points), color=colour, linestyle="--", linewidth=1, alpha=0.8,
                        label=f"{name} ({label(line)})" if line else name)

        return draw

    bound_line = dashed("bound_s", "analytic bound", scale)
    performance_line = dashed("performance_violations", "missed bound", skip_zeros=True)

    def unity_line(ax, line, colour):
        if line == lines[0]:
            ax.axhline(1.0, color="0.4", linestyle=":", linewidth=1, label="the bound")

    written = []
    for args in (
        ("iteration_time", f"mean iteration time ({unit})", "iteration_mean_s", scale, bound_line),
        ("ratio", "achieved / analytic bound", "ratio", 1.0, unity_line),
        ("accuracy", "final test accuracy", "accuracy"),
        ("violations", "violations per run", "correctness_violations", 1.0, performance_line, True,
         "correctness"),
    ):
        files = figure(*args)
        if files:
            written += files
    if not quiet:
        print("  plots: " + ", ".join(os.path.basename(w) for w in written))
    return 0


def main():
    parser = argparse.ArgumentParser(description="plots of pstwin outputs")
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="plots of a `pstwin sweep` directory")
    sweep.add_argument("dir")
    sweep.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.command == "sweep":
        return plot_sweep(args.dir, args.quiet)
    return 2


if __name__ == "__main__":
    sys.exit(main())
