"""Benchmark: the least budget, bounded from below, on the bench graphs.

    PYTHONPATH=. python bench/bench_peak_floor.py [--limits 1,5,20] [--search 20]
        [-o bench/results/peak_floor]

For each graph of bench/bench_bounds.py (the tiny zoo at module and op level, random_dag(n) for
n = 20, 30, 100, 250, 500): ``peak_lower_bound`` (one node's operands), the pebbling bound
``peak_floor`` with each time limit (a fresh graph each time: no cache), whether its search
finished, and the least peak a schedule reaches (``min_budget(exact=False)``: the best
baseline lowered by the peak descent, ``--search`` seconds). Columns in bytes and as a share
of the budget range (0% = static memory, 100% = checkpoint-all's peak: a budget of "p%"
is below the floor where p is below the share). Rows go to CSV/JSON as they come.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import remat
from remat.schedule.budget import budget_percent, checkpoint_all_peak
from remat.solvers import SolveOptions
from remat.solvers.bounds import peak_lower_bound
from remat.solvers.min_budget import min_budget
from remat.solvers.peak_floor import peak_floor

sys.path.insert(0, str(Path(__file__).parent))
from bench_bounds import GRAPH_DIR  # noqa: E402

RANDOM_SIZES = (20, 30, 100, 250, 500)


def graph_makers():
    """(name, a function building the graph anew), smallest first."""
    found = [(path.stem, lambda path=path: remat.RematGraph.from_json(path))
             for path in sorted(GRAPH_DIR.glob("*.json"))]
    found += [(f"random_dag{n}", lambda n=n: remat.graphs.random_dag(n, seed=0))
              for n in RANDOM_SIZES]
    return sorted(found, key=lambda item: item[1]().size)


def row(name: str, make, limits: list[float], search: float) -> dict:
    graph = make()
    low, top = graph.static_mem, checkpoint_all_peak(graph)
    share = lambda value: round(budget_percent(value, graph), 2)  # noqa: E731
    out = {"graph": name, "T": graph.size, "static": low, "checkpoint_all": top,
           "operands": peak_lower_bound(graph), "operands_pct": share(peak_lower_bound(graph))}
    for limit in limits:
        began = time.perf_counter()
        found = peak_floor(make(), time_limit=limit)
        out.update({f"floor_{limit:g}s": found.value, f"floor_{limit:g}s_pct": share(found.value),
                    f"exact_{limit:g}s": found.exact,
                    f"seconds_{limit:g}s": round(time.perf_counter() - began, 2)})
    least = min_budget(graph, SolveOptions(time_limit=search), exact=False).peak_memory
    out.update({"least_peak": least, "least_peak_pct": share(least)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="1,5,20")
    parser.add_argument("--search", type=float, default=20.0)
    parser.add_argument("--only", default=None, help="comma-separated graph names")
    parser.add_argument("-o", "--output", default="bench/results/peak_floor")
    args = parser.parse_args()
    limits = [float(x) for x in args.limits.split(",")]
    only = None if args.only is None else set(args.only.split(","))
    rows = []
    for name, make in graph_makers():
        if only is None or name in only:
            rows.append(row(name, make, limits, args.search))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    command = "PYTHONPATH=. python " + " ".join(sys.argv)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    plot(rows, limits[-1], out.with_suffix(".png"), command)


def plot(rows: list[dict], limit: float, path: Path, command: str) -> None:
    """Per graph: the operand bound, the pebbling bound and the least known peak, as shares of
    the budget range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = range(len(rows))
    for shift, key, label in ((-0.27, "operands_pct", "one node's operands"),
                              (0.0, f"floor_{limit:g}s_pct", f"pebbling bound, {limit:g} s"),
                              (0.27, "least_peak_pct", "least peak found")):
        ax.bar([i + shift for i in x], [r[key] for r in rows], width=0.27, label=label)
    ax.set_xticks(list(x), [r["graph"] for r in rows], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("% of the budget range")
    ax.set_title("No schedule peaks below the bounds (the least budget of a sweep)", fontsize=10)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, command, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
