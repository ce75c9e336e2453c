"""GPU check: compiled steps on CUDA, predicted against measured peak, step time, max batch.

    PYTHONPATH=. python bench/gpu_check.py [--models vgg16,gpt2] [--budgets 100%,70%,50%,30%]
                                           [--cap 16GiB] [--device cuda] [--tiny]

For each model (full size by default): capture once, then for each budget solve, run one
step, compare loss and gradients with the eager step, and print predicted vs measured peak
(``torch.cuda.max_memory_allocated``) and the median step time. Then the largest batch whose
step fits under ``--cap``, eager and with remat. Exits 0 with a message when CUDA is absent,
1 when a check fails (measured peak > 1.05 x predicted, or gradients off). ``--device cpu
--tiny`` runs the same code on CPU as a smoke test (no timing claims). Writes
bench/results/gpu_check.json.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch

import remat
from remat.bench.common import eager_step
from remat.bench.maxbatch import largest_batch
from remat.runtime.cache import cached_solve
from remat.runtime.step import CompiledStep

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = dict(rtol=1e-3, atol=1e-5)  # GPU kernels (cuDNN, TF32 off) differ in rounding only


def load(name, tiny, batch_size, device):
    model, inputs, loss_fn = remat.zoo.load(name, tiny=tiny, batch_size=batch_size)
    model = model.to(device)
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
    return model, inputs, loss_fn


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, model, device, repeats=5) -> float:
    times = []
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    model.zero_grad(set_to_none=True)
    return statistics.median(times) * 1e3


def budgets_check(name, args, device) -> tuple[list[dict], bool]:
    model, inputs, loss_fn = load(name, args.tiny, None, device)
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    eager_loss = eager_step(model, loss_fn)(*inputs).item()
    # kept as numpy arrays: a live tensor would count in the measured peak (CPU smoke test)
    eager_grads = [p.grad.cpu().numpy().copy() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    eager_ms = median_ms(lambda: eager_step(model, loss_fn)(*inputs), model, device)
    eager_peak = _measured(eager_step(model, loss_fn), inputs, model)
    start = time.perf_counter()
    cap = remat.capture(model, inputs, loss_fn, cost_model=args.cost_model)
    capture_s = time.perf_counter() - start
    print(f"\n{name}: {cap.graph.size} nodes, captured in {capture_s:.1f} s; eager step "
          f"{eager_ms:.1f} ms, peak {_gib(eager_peak)}")
    rows, ok = [], True
    for budget in args.budgets.split(","):
        try:
            sol = solve(cap.graph, budget, args)
        except remat.InfeasibleBudgetError as exc:
            print(f"  {budget:>5}: infeasible (min budget {_gib(exc.min_budget)})")
            continue
        step = CompiledStep(cap, sol)
        torch.manual_seed(0)
        model.zero_grad(set_to_none=True)
        loss = step(*inputs)
        exact = torch.allclose(loss.cpu(), torch.tensor(eager_loss), **TOLERANCE) and all(
            torch.allclose(p.grad.cpu(), torch.from_numpy(g), **TOLERANCE)
            for p, g in zip(model.parameters(), eager_grads))
        measured = _measured(step, inputs, model)
        step_ms = median_ms(lambda: step(*inputs), model, device)
        row = dict(model=name, budget=budget, method=sol.details.get("chosen", sol.method),
                   predicted=int(sol.peak_memory), measured=measured,
                   ratio=round(measured / sol.peak_memory, 4), step_ms=round(step_ms, 2),
                   eager_ms=round(eager_ms, 2), overhead=round(sol.overhead, 4), exact=exact)
        ok &= exact and measured <= 1.05 * sol.peak_memory
        rows.append(row)
        print(f"  {budget:>5}: {row['method']:<14} predicted {_gib(row['predicted'])} measured "
              f"{_gib(measured)} (x{row['ratio']:.3f}), step {step_ms:.1f} ms "
              f"(eager {eager_ms:.1f}), compute x{sol.overhead:.3f}, grads "
              f"{'match' if exact else 'DIFFER'}")
    del cap, model, inputs
    gc.collect()
    return rows, ok


def solve(graph, budget, args):
    """``args.method``'s schedule; if that method fails on the graph (not for the budget's
    sake), say so and use ``args.fallback`` so the check still runs."""
    try:
        return cached_solve(graph, budget, args.method, cache=False, time_limit=args.time_limit)
    except remat.InfeasibleBudgetError:
        raise
    except (remat.RematError, ValueError) as exc:
        print(f"  method {args.method!r} failed on this graph ({exc}); using {args.fallback!r}")
        return cached_solve(graph, budget, args.fallback, cache=False)


def _measured(fn, inputs, model) -> int:
    """Peak bytes of ``fn(*inputs)``: remat.measure_peak (CUDA from the inputs' device)."""
    model.zero_grad(set_to_none=True)
    gc.collect()
    value = int(remat.measure_peak(fn, *inputs)[1])
    model.zero_grad(set_to_none=True)
    return value


def fits(name, batch, cap_bytes, with_remat, args, device) -> bool:
    """Does one training step at this batch size stay under the cap (measured)?"""
    try:
        model, inputs, loss_fn = load(name, args.tiny, batch, device)
        if with_remat:
            cap = remat.capture(model, inputs, loss_fn, cost_model="flops")
            step = CompiledStep(cap, solve(cap.graph, cap_bytes, args))
            used = _measured(step, inputs, model)
        else:
            used = _measured(eager_step(model, loss_fn), inputs, model)
        return used <= cap_bytes
    except (remat.InfeasibleBudgetError, torch.cuda.OutOfMemoryError):
        return False
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def max_batch(name, cap_bytes, with_remat, args, device) -> int:
    """Largest batch that fits, searched from the zoo's default batch (remat's one search)."""
    _, inputs, _ = remat.zoo.load(name, tiny=args.tiny)
    return largest_batch(lambda b: fits(name, b, cap_bytes, with_remat, args, device),
                         start=int(inputs[0].shape[0]), limit=args.max_batch)


def _gib(value) -> str:
    return "n/a" if value is None else f"{value / 2**30:.3f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="vgg16,gpt2")
    parser.add_argument("--budgets", default="100%,70%,50%,30%")
    parser.add_argument("--method", default="auto")
    parser.add_argument("--fallback", default="chen-greedy",
                        help="method used where --method fails on a graph")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--cost-model", default="profile")
    parser.add_argument("--cap", default="16GiB", help="memory cap for the max-batch search")
    parser.add_argument("--max-batch", type=int, default=512)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny zoo variants (smoke test)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "gpu_check.json"))
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; nothing to check (exit 0).")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cap_bytes = remat.parse_budget(args.cap)
    report, ok = {"device": str(device), "cap": cap_bytes, "budgets": [], "max_batch": []}, True
    start = time.perf_counter()
    for name in args.models.split(","):
        rows, good = budgets_check(name, args, device)
        report["budgets"] += rows
        ok &= good
    print(f"\nLargest batch under {args.cap} (measured):")
    for name in args.models.split(","):
        eager = max_batch(name, cap_bytes, False, args, device)
        rematted = max_batch(name, cap_bytes, True, args, device)
        report["max_batch"].append(dict(model=name, eager=eager, remat=rematted))
        print(f"  {name}: eager {eager}, remat ({args.method}) {rematted}")
    report["seconds"] = round(time.perf_counter() - start, 1)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n{'OK' if ok else 'FAIL'}: {report['seconds']} s; wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
