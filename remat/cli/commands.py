"""The verbs of ``remat``. Each ``add_*`` registers one subcommand and its ``run`` function."""
from __future__ import annotations

import sys
import time

from remat.cli.table import render, solution_row


def add_solve(sub) -> None:
    p = sub.add_parser("solve", help="solve a graph file for a budget",
                       description="Find the schedule that minimises compute within a budget.")
    p.add_argument("graph", help="a remat-graph/1 JSON file (see `remat capture`)")
    p.add_argument("--budget", default="60%",
                   help="bytes, a size like 1.5GiB / 800MB, or a percentage like 60%% of the "
                        "checkpoint-all peak above static memory (default: 60%%)")
    p.add_argument("--method", default="auto", help="a method name or `all` (see --list)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per method")
    p.add_argument("-o", "--output", help="write the solution JSON here (single method)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(run=run_solve)


def run_solve(args) -> int:
    from remat.graph.core import RematGraph
    from remat.schedule.budget import parse_budget
    from remat.solvers import METHODS, SolveOptions, solver

    graph = RematGraph.from_json(args.graph)
    budget = parse_budget(args.budget, graph)
    methods = [m for m in METHODS if m != "auto"] if args.method == "all" else [args.method]
    options = SolveOptions(time_limit=args.time_limit)
    results = []
    for method in methods:
        fn = solver(method)  # unknown names fail here, listing the valid ones
        if method == "griewank" and not graph.is_chain:
            continue
        if len(methods) > 1:
            print(f"solving with {method} ...", file=sys.stderr, flush=True)
        results.append(fn(graph, budget, options))
    if args.output and len(results) == 1:
        results[0].to_json(args.output)
    if args.json:
        import json
        docs = [json.loads(r.to_json()) for r in results]
        for doc in docs:
            doc.pop("R"), doc.pop("S"), doc.pop("plan")
        print(json.dumps(docs[0] if len(docs) == 1 else docs, indent=2))
    else:
        print(render([solution_row(r) for r in results]))
    return 0 if any(r.feasible for r in results) else 3


def add_pending(sub, name: str, help_text: str, issue: int) -> None:
    p = sub.add_parser(name, help=f"{help_text} (not available yet)",
                       description=f"{help_text}. Not available yet: it arrives with issue {issue}.")
    p.add_argument("rest", nargs="*", help=argparse_suppress())
    p.set_defaults(run=lambda args: _pending(name, issue))


def _pending(name: str, issue: int) -> int:
    print(f"remat {name}: not available yet in this version (tracked in issue {issue}).",
          file=sys.stderr)
    return 2


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


REGISTRARS = [
    lambda sub: add_pending(sub, "demo", "the main job on a built-in model", 5),
    lambda sub: add_pending(sub, "capture", "capture a model's training step as a graph", 4),
    add_solve,
    lambda sub: add_pending(sub, "sweep", "compute overhead against budget for every method", 3),
    lambda sub: add_pending(sub, "maxbatch", "largest batch that fits a memory cap", 5),
]
