"""Compare two runs of bench/bench_bounds.py row by row, over their seeds.

    python bench/compare_bounds.py BEFORE.csv AFTER.csv [--method auto] [--tolerance 1e-3]

A row is a graph, a budget and a method; each file may hold it once per seed (``--seeds``).
A row is "schedule" where more of its runs found a schedule after than before, "lost" where
fewer did, "none" where no run found one on either side; otherwise "lower" only where every
run's cost after is below every run's cost before (by more than ``--tolerance``, relative),
"higher" the other way round, else "within" (the ranges overlap: at 60 s a row's cost can
move by 5% from one run to the next). Printed: every row that is not "within" or "none",
the rows in one file only, the counts, the mean over rows of log(cost / bound) on each side
(each row's median over its runs; rows with a cost and a bound on both sides) and each
side's slowest call.
"""
from __future__ import annotations

import argparse
import csv
import math
import statistics
from collections import defaultdict


def load(path: str, method: str) -> dict[tuple, list[dict]]:
    """The file's rows of ``method``, grouped by (graph, budget)."""
    rows = defaultdict(list)
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["method"] == method:
                rows[(row["graph"], row["budget"])].append(row)
    return rows


def costs(rows: list[dict]) -> list[float]:
    """The costs of the runs that found a schedule."""
    return [float(r["cost"]) for r in rows if r["cost"]]


def verdict(before: list[dict], after: list[dict], tolerance: float) -> str:
    old, new = costs(before), costs(after)
    found_before, found_after = len(old) / len(before), len(new) / len(after)
    if found_after != found_before:
        return "schedule" if found_after > found_before else "lost"
    if not old:
        return "none"
    if max(new) < min(old) * (1 - tolerance):
        return "lower"
    if min(new) > max(old) * (1 + tolerance):
        return "higher"
    return "within"


def log_gap(rows: list[dict]) -> float | None:
    """The median over the row's runs of log(cost / bound); None without a positive cost and
    bound."""
    gaps = [math.log(float(r["cost"]) / float(r["bound"])) for r in rows
            if r["cost"] and r["bound"] and float(r["cost"]) > 0 and float(r["bound"]) > 0]
    return statistics.median(gaps) if gaps else None


def span(rows: list[dict]) -> str:
    found = costs(rows)
    if not found:
        return "none"
    low, high = min(found), max(found)
    return f"{low:.6f}" if low == high else f"{low:.6f}-{high:.6f}"


def compare(before: dict, after: dict, tolerance: float) -> tuple[list[str], dict, list]:
    """(a line per row that moved, the counts per verdict, [mean log gap before, after, rows])."""
    lines, counts, sums = [], defaultdict(int), [0.0, 0.0, 0]
    for key in sorted(before.keys() & after.keys()):
        found = verdict(before[key], after[key], tolerance)
        counts[found] += 1
        if found not in ("within", "none"):
            lines.append(f"{key[0]} {key[1]}: {span(before[key])} -> {span(after[key])} "
                         f"({len(before[key])} / {len(after[key])} runs): {found}")
        old, new = log_gap(before[key]), log_gap(after[key])
        if old is not None and new is not None:
            sums = [sums[0] + old, sums[1] + new, sums[2] + 1]
    return lines, dict(counts), sums


def slowest(rows: dict) -> str:
    every = [r for group in rows.values() for r in group]
    if not every:
        return "no rows"
    worst = max(every, key=lambda r: float(r["seconds"]))
    return f"{worst['seconds']} s ({worst['graph']} {worst['budget']})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args(argv)
    before, after = load(args.before, args.method), load(args.after, args.method)
    lines, counts, (old, new, rows) = compare(before, after, args.tolerance)
    print("\n".join(lines) or "no row moved beyond the spread of its runs")
    for name, only in (("before", before.keys() - after.keys()),
                       ("after", after.keys() - before.keys())):
        if only:
            print(f"only {name}:", ", ".join(f"{g} {b}" for g, b in sorted(only)))
    print("rows:", ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))
    if rows:
        print(f"mean log(cost / bound) over {rows} rows: {old / rows:.4f} -> {new / rows:.4f}")
    print(f"slowest call: {slowest(before)} -> {slowest(after)}")


if __name__ == "__main__":
    main()
