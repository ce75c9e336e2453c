"""``remat maxbatch``: the largest batch whose training step fits a memory cap, measured.

For each probed batch size the plain eager step and the compiled step (solved for a budget
equal to the cap) run once and their peaks are measured (storage tracking on CPU,
``max_memory_allocated`` on CUDA). A batch "fits" when the measured peak is at most the cap.
The search doubles the batch until a step does not fit, then bisects.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import dataclass

from remat.errors import InfeasibleBudgetError
from remat.solvers import interrupt


@dataclass(frozen=True)
class Probe:
    batch: int
    mode: str  # "eager" | "remat"
    peak: float | None  # measured bytes; None: not run (no schedule fits)
    fits: bool
    overhead: float | None = None


def eager_peak(spec: str, batch: int, tiny: bool) -> float:
    from remat.bench.common import eager_step
    from remat.runtime.memory import measure_peak
    from remat.zoo import resolve

    model, inputs, loss_fn = resolve(spec, tiny=tiny, batch_size=batch)
    return measure_peak(eager_step(model, loss_fn), *inputs)[1]


def remat_probe(spec: str, batch: int, tiny: bool, cap: float, method: str,
                time_limit: float) -> Probe:
    from remat.runtime import compile
    from remat.runtime.memory import measure_peak
    from remat.zoo import resolve

    model, inputs, loss_fn = resolve(spec, tiny=tiny, batch_size=batch)
    try:
        step = compile(model, inputs, loss_fn, budget=cap, method=method, cache=False,
                       cost_model="flops", time_limit=time_limit)
    except InfeasibleBudgetError:
        return Probe(batch, "remat", None, False)
    peak = measure_peak(step, *inputs)[1]
    return Probe(batch, "remat", peak, peak <= cap, step.solution.overhead)


def largest_batch(fits, start: int = 1, limit: int = 4096) -> int:
    """Largest b in [0, limit] with fits(b), assuming fits is monotone (0 if none): doubles
    from ``start`` while it fits, then bisects (below ``start`` if even that is too big)."""
    if fits(start):
        low, high = start, start * 2
        while high <= limit and fits(high):
            low, high = high, high * 2
        high = min(high, limit + 1)
    else:
        low, high = 0, start
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def max_batch(spec: str, cap: float, tiny: bool = False, method: str = "auto",
              time_limit: float = 10.0, limit: int = 4096, log=sys.stderr) -> dict:
    probes: list[Probe] = []

    def eager_fits(batch: int) -> bool:
        peak = eager_peak(spec, batch, tiny)
        probes.append(Probe(batch, "eager", peak, peak <= cap))
        _say(log, probes[-1])
        return probes[-1].fits

    def remat_fits(batch: int) -> bool:
        with interrupt.catching():
            probes.append(remat_probe(spec, batch, tiny, cap, method, time_limit))
            if interrupt.requested():  # a schedule cut short proves nothing: stop
                raise KeyboardInterrupt
        _say(log, probes[-1])
        return probes[-1].fits

    eager = largest_batch(eager_fits, limit=limit)
    with_remat = largest_batch(remat_fits, start=max(eager, 1), limit=limit)
    return {"model": spec, "cap": cap, "eager": eager, "remat": with_remat,
            "probes": [copy.copy(p.__dict__) for p in probes]}


def _say(log, probe: Probe) -> None:
    if log is None:
        return
    from remat.solvers.api import format_bytes

    peak = "no schedule fits" if probe.peak is None else format_bytes(probe.peak)
    extra = f", overhead {probe.overhead:.3f}x" if probe.overhead else ""
    print(f"  batch {probe.batch:>5} {probe.mode:<5}: {peak}{extra} -> "
          f"{'fits' if probe.fits else 'too big'}", file=log, flush=True)
