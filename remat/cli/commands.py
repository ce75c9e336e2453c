"""The verbs of ``remat``. Each ``add_*`` registers one subcommand and its ``run`` function."""
from __future__ import annotations

import math
import sys
import time

from remat.cli.table import render, solution_row
from remat.graph.order import ORDERS


def add_solve(sub) -> None:
    p = sub.add_parser("solve", help="solve a graph file for a budget",
                       description="Find the schedule that minimises compute within a budget.")
    p.add_argument("graph", help="a remat-graph/1 JSON file (see `remat capture`), a "
                                 "synthetic spec (linear:32, unet:4, random:100) or a model "
                                 "(zoo name / package.module:factory), captured")
    p.add_argument("--budget", default="60%",
                   help="bytes, a size like 1.5GiB / 800MB, or a percentage like 60%% of the "
                        "checkpoint-all peak above static memory (default: 60%%)")
    p.add_argument("--method", default="auto", help="a method name or `all` (see --list)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per method")
    p.add_argument("-o", "--output", help="write the solution JSON here (single method)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(run=run_solve)


def run_solve(args) -> int:
    from remat.schedule.budget import parse_budget
    from remat.solvers import SolveOptions, interrupt, solver
    from remat.solvers.base import expand_methods

    graph, _ = load_graph(args.graph)
    budget = parse_budget(args.budget, graph)
    methods = expand_methods(args.method, graph)
    options = SolveOptions(time_limit=args.time_limit, progress=_progress_printer(graph))
    results = []
    with interrupt.catching():  # Ctrl-C: stop after the solve it cuts short
        for method in methods:
            if len(methods) > 1:
                print(f"solving with {method} ...", file=sys.stderr, flush=True)
            results.append(solver(method)(graph, budget, options))
            if interrupt.requested():
                print("interrupted: the best schedule found so far", file=sys.stderr,
                      flush=True)
                break
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


def _progress_printer(graph):
    """Print incumbent, bound and gap of a long solve to stderr (and ``auto``'s method
    running), at most twice a second."""
    last = [0.0]
    total = graph.total_cost or 1.0

    def show(event: dict) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.5:
            return
        last[0] = now
        incumbent, bound = event.get("incumbent", math.inf), event.get("bound", -math.inf)
        best = f"{incumbent / total:.3f}x" if math.isfinite(incumbent) else "none yet"
        proven = f"{bound / total:.3f}x" if math.isfinite(bound) else "-"
        gap = event.get("gap", math.nan)
        shown_gap = f"{gap:.1%}" if math.isfinite(gap) else "-"
        method = f"  ({event['method']})" if event.get("method") else ""
        print(f"  {event.get('time', 0):7.1f}s  best {best}  bound {proven}  gap {shown_gap}"
              f"{method}", file=sys.stderr, flush=True)

    return show


SYNTHETIC = {"linear": "linear", "unet": "unet", "random_dag": "random_dag", "random": "random_dag"}


def load_graph(spec: str):
    """A graph from a JSON file, a synthetic spec (``linear:32``, ``unet:4``, ``random:100``),
    or a model (zoo name or ``package.module:factory``), captured."""
    import os

    from remat import graphs
    from remat.graph.core import RematGraph

    if spec.endswith(".json") or os.path.isfile(spec):
        return RematGraph.from_json(spec), spec
    kind, _, size = spec.partition(":")
    if kind in SYNTHETIC and size.isdigit():
        return getattr(graphs, SYNTHETIC[kind])(int(size)), spec
    return _captured_graph(spec), spec


def _captured_graph(spec: str, tiny: bool = False, batch_size: int | None = None,
                    cost_model: str = "profile", granularity: str = "module",
                    order: str = "memory"):
    try:
        from remat.capture import capture
        from remat.zoo import resolve
    except ImportError as exc:
        raise SystemExit(f"remat: cannot capture {spec!r}: model capture is not available "
                         f"({exc}); give a graph JSON file or a synthetic spec like linear:32")
    model, inputs, loss_fn = resolve(spec, tiny=tiny, batch_size=batch_size)
    return capture(model, inputs, loss_fn, cost_model=cost_model, granularity=granularity,
                   order=order).graph


def add_capture(sub) -> None:
    p = sub.add_parser("capture", help="capture a model's training step as a graph JSON",
                       description="Trace one training step (forward, loss, backward) of a "
                                   "model and write its remat graph with measured costs.")
    p.add_argument("model", help="a zoo name (see --list) or package.module:factory, where "
                                 "factory(batch_size=None) returns (model, example_inputs, "
                                 "loss_fn)")
    p.add_argument("-o", "--output", default="graph.json", help="graph JSON to write")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--tiny", action="store_true", help="the small variant of a zoo model")
    p.add_argument("--cost-model", default="profile", choices=["profile", "flops", "unit"])
    p.add_argument("--granularity", default="module", choices=["module", "op"])
    p.add_argument("--order", default="memory", choices=ORDERS,
                   help="node order: memory (default; a topological order that lowers the "
                        "plain step's peak, where it does) or trace (as autograd traced it)")
    p.set_defaults(run=run_capture)


def run_capture(args) -> int:
    from remat.schedule.budget import checkpoint_all_peak
    from remat.solvers.api import format_bytes

    start = time.perf_counter()
    print(f"capturing {args.model} ...", file=sys.stderr, flush=True)
    graph = _captured_graph(args.model, args.tiny, args.batch_size, args.cost_model,
                            args.granularity, args.order)
    graph.to_json(args.output)
    print(f"wrote {args.output}: {graph.size} nodes, static {format_bytes(graph.static_mem)}, "
          f"checkpoint-all peak {format_bytes(checkpoint_all_peak(graph))} "
          f"({time.perf_counter() - start:.1f}s)")
    return 0


def add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="compute overhead against budget: CSV + PNG",
                       description="Solve at budgets from tight to unconstrained with several "
                                   "methods; write sweep.csv, sweep.json and sweep.png.")
    p.add_argument("model", help="graph JSON, synthetic spec (linear:32, unet:4, random:100) "
                                 "or a model (zoo name / package.module:factory)")
    p.add_argument("--methods", default="all", help="comma-separated method names, or `all`")
    p.add_argument("--budgets", default=None,
                   help="comma-separated percentages (default: 10,20,...,100)")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve")
    p.add_argument("-o", "--output", default="sweep-out", help="output directory")
    p.set_defaults(run=run_sweep_cmd)


def run_sweep_cmd(args) -> int:
    from remat.bench.sweep import default_fractions, run_sweep, write_sweep
    from remat.schedule.budget import parse_percentage
    from remat.solvers.base import expand_methods

    graph, name = load_graph(args.model)
    methods = expand_methods(args.methods, graph)
    fractions = default_fractions() if not args.budgets else \
        [parse_percentage(b.strip() if b.strip().endswith("%") else b.strip() + "%")
         for b in args.budgets.split(",")]
    print(f"sweeping {name}: {graph.size} nodes, {len(methods)} methods, "
          f"{len(fractions)} budgets", file=sys.stderr)
    rows = run_sweep(graph, methods, fractions, time_limit=args.time_limit)
    command = "remat " + " ".join(sys.argv[1:]) if sys.argv[0].endswith("remat") else \
        "remat sweep " + args.model
    paths = write_sweep(rows, graph, args.output, command, f"{name} ({graph.size} nodes)")
    print("wrote " + ", ".join(paths.values()))
    return 0


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="the main job on a built-in model",
                       description="Capture a built-in model's training step, solve it at "
                                   "several budgets, run each schedule for real and compare "
                                   "predicted with measured peak memory and gradients with "
                                   "eager.")
    p.add_argument("--model", default="unet", help="zoo model (tiny variant; default unet)")
    p.add_argument("--budgets", default="100%,90%,80%")
    p.add_argument("--methods", default="checkpoint-all,chen-greedy,auto")
    p.add_argument("--time-limit", type=float, default=20.0, help="seconds per solve")
    p.set_defaults(run=run_demo)


def run_demo(args) -> int:
    from remat.bench.demo import demo

    rows = demo(args.model, tuple(b.strip() for b in args.budgets.split(",")),
                tuple(m.strip() for m in args.methods.split(",")), args.time_limit)
    return 0 if all(r[-1] in ("yes", "-") for r in rows) else 1


def add_maxbatch(sub) -> None:
    p = sub.add_parser("maxbatch", help="largest batch that fits a memory cap, measured",
                       description="Find the largest batch whose training step fits --memory, "
                                   "eager and with remat, by running the steps.")
    p.add_argument("model", help="zoo name or package.module:factory")
    p.add_argument("--memory", required=True, help="the cap: bytes, 2GiB, 800MB")
    p.add_argument("--tiny", action="store_true", help="the small variant of a zoo model")
    p.add_argument("--method", default="auto")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per solve")
    p.add_argument("--limit", type=int, default=4096, help="largest batch tried")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run_maxbatch)


def run_maxbatch(args) -> int:
    import json

    from remat.bench.maxbatch import max_batch
    from remat.schedule.budget import parse_budget
    from remat.solvers.api import format_bytes

    cap = parse_budget(args.memory)
    result = max_batch(args.model, cap, args.tiny, args.method, args.time_limit, args.limit)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        gain = f" ({result['remat'] / result['eager']:.2f}x)" if result["eager"] else ""
        print(f"{args.model} under {format_bytes(cap)}: largest batch {result['eager']} eager, "
              f"{result['remat']} with remat{gain}")
    return 0


REGISTRARS = [
    add_demo,
    add_capture,
    add_solve,
    add_sweep,
    add_maxbatch,
]
