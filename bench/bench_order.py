"""Benchmark: what the node order of a captured graph does to its peaks and its schedules.

    PYTHONPATH=. python bench/bench_order.py [--models vgg16,...] [--search 10]
        [--budgets 30%,40%] [--time-limit 30] [-o bench/results/order]

Schedules run each stage's nodes in graph order, so the order bounds every schedule's peak.
For each tiny zoo model at module and op granularity (FLOP costs), captured twice, as traced
(``order="trace"``: forward nodes, then backward ones, as autograd traced them) and as
``remat.capture`` now does by default (``order="memory"``: ``remat.graph.order.memory_order``
where it lowers checkpoint-all's peak):

- checkpoint-all's peak (nothing recomputed) in each order;
- the least peak a schedule reaches (``min_budget(exact=False)``, ``--search`` seconds: the
  best baseline lowered by the peak descent) and the pebbling bound below it;
- where the order changed, ``auto``'s cost and proven bound at each budget, in bytes: a share
  of the traced graph's budget range, the same bytes for both orders.

Peaks are shares of the traced graph's budget range (0% = static memory, 100% = its
checkpoint-all peak). Costs are multiples of the total cost (1.0 = nothing recomputed); both
orders have the same nodes, so the same total. Rows go to CSV/JSON as they come.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import remat
from remat.capture import capture
from remat.schedule import checkpoint_all_peak
from remat.schedule.budget import budget_percent
from remat.solvers import SolveOptions, solver
from remat.solvers.bounds import forget_bounds
from remat.solvers.min_budget import min_budget

sys.path.insert(0, str(Path(__file__).parent))
from bench_bounds import status_of  # noqa: E402

MODELS = ("vgg16", "gpt2", "unet", "mobilenet_v2", "resnet50", "fcn_resnet50")


def captured(name: str, granularity: str) -> dict:
    """The graph of each order."""
    found = {}
    for order in ("trace", "memory"):
        model, inputs, loss_fn = remat.zoo.load(name, tiny=True)
        found[order] = capture(model.train(), inputs, loss_fn, cost_model="flops",
                               granularity=granularity, order=order).graph
    return found


def share(value: float, graph) -> float:
    """``value`` bytes as a percentage of ``graph``'s budget range, two decimals."""
    return round(budget_percent(value, graph), 2)


def row_for(name: str, granularity: str, search: float, budgets: list[str],
            time_limit: float) -> dict:
    graphs = captured(name, granularity)
    trace = graphs["trace"]
    row = dict(graph=f"{name}-{granularity}", T=trace.size,
               reordered=graphs["memory"].names != trace.names)
    for order, graph in graphs.items():
        row[f"checkpoint_all_{order}"] = checkpoint_all_peak(graph)
        row[f"checkpoint_all_{order}_pct"] = share(checkpoint_all_peak(graph), trace)
    if not row["reordered"]:
        return row
    for order, graph in graphs.items():
        low = min_budget(graph, SolveOptions(time_limit=search), exact=False)
        row[f"least_peak_{order}_pct"] = share(low.peak_memory, trace)
        row[f"floor_{order}_pct"] = share(low.lower_bound, trace)
    for percent in budgets:
        budget = remat.parse_budget(percent, trace)
        for order, graph in graphs.items():
            forget_bounds(graph)
            began = time.perf_counter()
            sol = solver("auto")(graph, budget, SolveOptions(time_limit=time_limit))
            key = f"{percent}_{order}"
            row[f"{key}_status"] = status_of(sol)  # "no schedule": none found, none proven
            row[f"{key}_cost"] = round(sol.compute_cost / graph.total_cost, 6) \
                if sol.feasible else None
            row[f"{key}_bound"] = round(sol.lower_bound / graph.total_cost, 6) \
                if sol.feasible else None
            row[f"{key}_seconds"] = round(time.perf_counter() - began, 2)
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--granularities", default="module,op")
    parser.add_argument("--search", type=float, default=10.0)
    parser.add_argument("--budgets", default="30%,40%")
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("-o", "--output", default="bench/results/order")
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = "PYTHONPATH=. python " + " ".join(sys.argv)
    rows = []
    for name in args.models.split(","):
        for granularity in args.granularities.split(","):
            rows.append(row_for(name, granularity, args.search, args.budgets.split(","),
                                args.time_limit))
            print(json.dumps(rows[-1]), flush=True)
            write(rows, out, command)
    plot(rows, out.with_suffix(".png"), command)


def write(rows: list[dict], out: Path, command: str) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(out.with_suffix(".csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))


def plot(rows: list[dict], path: Path, command: str) -> None:
    """Per graph whose order changed: checkpoint-all's peak and the least peak found, in
    each order, as shares of the traced graph's budget range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    changed = [r for r in rows if r["reordered"]]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bars = (("checkpoint_all_trace_pct", "checkpoint-all, as traced"),
            ("checkpoint_all_memory_pct", "checkpoint-all, memory order"),
            ("least_peak_trace_pct", "least peak found, as traced"),
            ("least_peak_memory_pct", "least peak found, memory order"))
    for k, (key, label) in enumerate(bars):
        ax.bar([i + (k - 1.5) * 0.2 for i in range(len(changed))], [r[key] for r in changed],
               width=0.2, label=label)
    ax.set_xticks(range(len(changed)), [r["graph"] for r in changed], rotation=30, ha="right")
    ax.set_ylabel("% of the traced graph's budget range")
    ax.set_title("Peaks of the graphs whose order capture changes", fontsize=10)
    ax.set_ylim(0, 130)
    ax.legend(fontsize=8, ncol=2, loc="upper left")
    fig.text(0.01, 0.01, command, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
