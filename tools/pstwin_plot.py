#!/usr/bin/env python3
"""Plots of pstwin outputs (docs/SWEEP.md).

    pstwin_plot.py run DIR [--out OUT] [--quiet]

reads DIR/results.json (written by `pstwin sim` and `pstwin run`) and, where present, DIR/resolved.toml
(the scenario's description and workload) and writes, as PNG and SVG into OUT (default DIR):

    iterations   each iteration's time, with the mean and the analytic bound where one applies
    links        each link's utilisation of its bandwidth (simulated or emulated); bytes per link
                 where no bandwidth was simulated or emulated (loopback real runs)
    links_over_time  the utilisation over time of the 8 links that carried most (simulated and
                 namespace-cluster runs)
    accuracy     test accuracy against iteration and time (trained workloads only)

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


def pyplot():
    """matplotlib's pyplot set up for files with fixed ids and no dates, or None when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("pstwin_plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return None
    plt.rcParams["svg.hashsalt"] = "pstwin"
    return plt


def save(plt, fig, base):
    """Writes fig as base.png and base.svg without the software or date stamps; returns the paths."""
    written = []
    for ext, metadata in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
        fig.savefig(f"{base}.{ext}", metadata=metadata)
        written.append(f"{base}.{ext}")
    plt.close(fig)
    return written


def heading(ax, title, subtitle, pad=6):
    ax.set_title(f"{title}\n{subtitle}" if subtitle else title, fontsize=10, pad=pad)


def plot_sweep(directory, quiet):
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
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
        heading(ax, f"{title}: {ylabel} vs {x_field}", subtitle)
        ax.annotate(error_note, xy=(1, 0), xycoords="axes fraction", xytext=(-4, 4),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="0.35")
        handles, _ = ax.get_legend_handles_labels()
        if handles and any(h.get_label() and not h.get_label().startswith("_") for h in handles):
            ax.legend(fontsize=8, ncol=2 if len(handles) > 8 else 1)
        fig.tight_layout()
        return save(plt, fig, os.path.join(directory, measure.replace(" ", "_")))

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


def scenario_text(directory, results):
    """The scenario's name, description and workload kind: resolved.toml where the run wrote one,
    else results.json's name alone."""
    name, description, kind = results.get("scenario", "run"), "", ""
    path = os.path.join(directory, "resolved.toml")
    if os.path.exists(path):
        try:
            import tomllib

            with open(path, "rb") as f:
                scenario = tomllib.load(f)
            name = scenario.get("name", name)
            description = scenario.get("description", "")
            kind = scenario.get("workload", {}).get("kind", "")
        except (ImportError, ValueError):
            pass  # Python < 3.11 or a hand-edited file: the titles carry the name only
    return name, description, kind


def accuracy_points(accuracy):
    """(iteration, time_s, accuracy) per point: labelled objects, or the bare arrays of older files."""
    points = []
    for point in accuracy.get("curve", []):
        if isinstance(point, dict):
            points.append((point["iteration"], point["time_s"], point["accuracy"]))
        else:
            points.append(tuple(point[:3]))
    return points


def seconds_unit(values):
    """A scale and unit that keep times readable: ms below one second."""
    return (1e3, "ms") if values and max(values) < 1 else (1.0, "s")


def plot_run(directory, out, quiet):
    plt = pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    with open(os.path.join(directory, "results.json")) as f:
        results = json.load(f)
    name, description, kind = scenario_text(directory, results)
    backend = results.get("backend", "")
    if backend == "real" and results.get("van"):
        backend += f", {results['van']} van"
    title = f"{name} ({backend}, seed {results.get('seed', '?')})"
    os.makedirs(out, exist_ok=True)
    written = []

    iterations = results.get("iterations", [])
    if iterations:
        times = [it["time_s"] for it in iterations]
        scale, unit = seconds_unit(times)
        fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
        xs = [it["index"] for it in iterations]
        ax.plot(xs, [t * scale for t in times], marker="o" if len(xs) <= 60 else None, markersize=4,
                linewidth=1.4, color="tab:blue", label="iteration time (slowest worker)")
        mean = statistics.fmean(times)
        ax.axhline(mean * scale, color="tab:blue", linestyle=":", linewidth=1,
                   label=f"mean {mean * scale:.3g} {unit}")
        bound = results.get("bound")
        if bound and bound.get("time_s"):
            ax.axhline(bound["time_s"] * scale, color="tab:red", linestyle="--", linewidth=1.2,
                       label=f"analytic bound {bound['time_s'] * scale:.3g} {unit}")
        ax.set_xlabel("iteration")
        ax.set_ylabel(f"iteration time ({unit})")
        ax.xaxis.get_major_locator().set_params(integer=True)
        highest = max(times + [bound["time_s"]] if bound and bound.get("time_s") else times)
        ax.set_ylim(0, highest * scale * 1.15)
        ax.grid(True, alpha=0.3)
        heading(ax, f"{title}: iteration times", description)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        written += save(plt, fig, os.path.join(out, "iterations"))

    links = [link for link in results.get("links", []) if link.get("bytes", 0) > 0]
    if links:
        names = [link["name"] for link in links]
        measured = [link for link in links if link.get("bandwidth_Bps") and "utilization" in link]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(links) + 2.5), 4.5), dpi=110)
        positions = range(len(links))
        if len(measured) == len(links):
            phase = all("phase_utilization" in link for link in links)
            width = 0.4 if phase else 0.7
            bars = ax.bar([p - (width / 2 if phase else 0) for p in positions],
                          [100 * link["utilization"] for link in links], width, color="tab:blue",
                          label="over the whole run")
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
            if phase:
                bars = ax.bar([p + width / 2 for p in positions],
                              [100 * link["phase_utilization"] for link in links], width, color="tab:orange",
                              label="over the push/pull phase")
                ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
            ax.set_ylabel("utilisation (% of the link's bandwidth)")
            ax.set_ylim(0, max(100.0, ax.get_ylim()[1]))
            rates = sorted({link["bandwidth_Bps"] for link in links})
            what = "emulated" if results.get("network_emulation") else "simulated"
            rate_text = ", ".join(f"{8 * r / 1e9:g} Gb/s" for r in rates)
            heading(ax, f"{title}: link utilisation", f"{what} bandwidth {rate_text}")
            ax.legend(fontsize=8)
            stem = "links"
        else:
            bars = ax.bar(positions, [link["bytes"] / 1e6 for link in links], 0.7, color="tab:gray",
                          label="bytes carried")
            ax.bar_label(bars, fmt="%.3g", fontsize=7, padding=2)
            ax.set_ylabel("bytes carried (MB)")
            heading(ax, f"{title}: bytes per link",
                    "no bandwidth was emulated (loopback): bytes only, no utilisation")
            ax.legend(fontsize=8)
            stem = "links"
        ax.set_xticks(list(positions), names, rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("link (host.up: sent, host.down: received)")
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        written += save(plt, fig, os.path.join(out, stem))

    # Utilisation over time of the busiest links (by bytes), where the run recorded it.
    timed = sorted((link for link in links if link.get("over_time", {}).get("utilization")),
                   key=lambda link: (-link["bytes"], link["name"]))[:8]
    if timed:
        fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
        width_s = timed[0]["over_time"]["width_s"]
        longest = max(len(link["over_time"]["utilization"]) for link in timed)
        scale, unit = seconds_unit([width_s * longest])
        for index, link in enumerate(timed):
            values = link["over_time"]["utilization"]
            width = link["over_time"]["width_s"]
            colour, _ = style(index, len(timed))
            # Each bucket drawn over its whole width: the last value repeated at the bucket's end.
            ax.step([i * width * scale for i in range(len(values) + 1)],
                    [100 * v for v in values] + [100 * values[-1]], where="post", color=colour, linestyle="-" if link["name"].endswith(".up") else "--",
                    linewidth=1.2, label=link["name"])
        ax.set_xlabel(f"{'simulated' if results.get('backend') == 'sim' else 'wall-clock'} time ({unit})")
        ax.set_ylabel("utilisation (% of the link's bandwidth)")
        ax.set_xlim(0, width_s * longest * scale)
        ax.set_ylim(0, max(105.0, ax.get_ylim()[1]))
        ax.grid(True, alpha=0.3)
        more = len([link for link in links if link.get("over_time")]) - len(timed)
        heading(ax, f"{title}: link utilisation over time",
                f"the {len(timed)} links that carried most, in buckets of {width_s * scale:.3g} {unit}"
                + (f" ({more} more in results.json)" if more > 0 else ""))
        ax.legend(fontsize=7, ncol=2, loc="upper right")
        fig.tight_layout()
        written += save(plt, fig, os.path.join(out, "links_over_time"))

    accuracy = results.get("accuracy")
    points = accuracy_points(accuracy) if accuracy else []
    if points and (kind in ("", "mlp")):
        fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
        its = [p[0] for p in points]
        accs = [p[2] for p in points]
        ax.plot(its, accs, marker="o", color="tab:green", linewidth=1.6, label="test accuracy")
        if accuracy.get("diverged"):
            ax.axvline(accuracy["diverged_iteration"], color="tab:red", linestyle="--", linewidth=1.2,
                       label=f"diverged at iteration {accuracy['diverged_iteration']}: "
                             f"{accuracy.get('diverged_reason', '')}")
        ax.set_xlabel("iteration")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
        # The simulated or wall-clock time of each evaluation, on a second axis above.
        times = [p[1] for p in points]
        if len(points) > 1 and times[-1] > times[0]:
            scale, unit = seconds_unit(times)
            top = ax.secondary_xaxis(
                "top", functions=(lambda i: i * (times[-1] - times[0]) / (its[-1] - its[0]) * scale,
                                  lambda t: t / scale * (its[-1] - its[0]) / (times[-1] - times[0])))
            top.set_xlabel(f"{'simulated' if results.get('backend') == 'sim' else 'wall-clock'} time ({unit})",
                           fontsize=8, labelpad=2)
            top.tick_params(labelsize=8)
        heading(ax, f"{title}: test accuracy, final {accuracy.get('final', accs[-1]):.4f}", description,
                pad=10)
        # Clear of the curve: below it when it learned, above it when it stayed near chance.
        ax.legend(fontsize=8, loc="lower right" if accs[-1] >= 0.5 else "upper right")
        fig.tight_layout()
        written += save(plt, fig, os.path.join(out, "accuracy"))

    if not quiet:
        print("  plots: " + ", ".join(written))
    return 0


def main():
    parser = argparse.ArgumentParser(description="plots of pstwin outputs")
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("sweep", help="plots of a `pstwin sweep` directory")
    sweep.add_argument("dir")
    sweep.add_argument("--quiet", action="store_true")
    run = sub.add_parser("run", help="plots of one run's results.json (pstwin sim or pstwin run)")
    run.add_argument("dir")
    run.add_argument("--out", help="where the plots go (default: DIR)")
    run.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.command == "run":
        return plot_run(args.dir, args.out or args.dir, args.quiet)
    if args.command == "sweep":
        return plot_sweep(args.dir, args.quiet)
    return 2


if __name__ == "__main__":
    sys.exit(main())
