"""``step.explain()``: what a compiled step keeps, recomputes, and where its peak is."""
from __future__ import annotations

from remat.schedule.simulate import simulate
from remat.solvers.api import format_bytes


def explain(step) -> str:
    """A plain-text report of ``step``'s schedule, ending with its generated code."""
    graph, sol = step.graph, step.solution
    sim = simulate(graph, sol.R, sol.S)
    lines = _summary(graph, sol)
    lines += _recomputed(graph, step.times_computed)
    lines += _peak(graph, sim)
    lines += _replayed(step)
    lines += ["", "Generated code:", step.code.strip("\n")]
    return "\n".join(lines)


def _summary(graph, sol) -> list[str]:
    budget = "none" if sol.budget is None else format_bytes(sol.budget)
    return [f"remat step: method {sol.method!r} ({sol.status}), {graph.size} nodes, "
            f"plan cache: {sol.details.get('plan_cache', 'off')}",
            f"budget {budget}, predicted peak {format_bytes(sol.peak_memory)} "
            f"(static {format_bytes(graph.static_mem)}), compute {sol.compute_cost:.6g} = "
            f"{sol.overhead:.3f} x one plain step"]


def _recomputed(graph, times) -> list[str]:
    again = [i for i, count in enumerate(times) if count > 1]
    kept = [i for i, count in enumerate(times) if count == 1]
    lines = ["", f"Recomputed ({len(again)} of {graph.size} nodes; times computed):"]
    lines += [f"  {i:4d} {graph.names[i]!r} x{times[i]}  ({format_bytes(graph.mem[i])})"
              for i in again] or ["  nothing: every value is computed once"]
    lines.append(f"Computed once ({len(kept)} nodes): "
                 + ", ".join(repr(graph.names[i]) for i in kept[:12])
                 + (", ..." if len(kept) > 12 else ""))
    return lines


def _peak(graph, sim) -> list[str]:
    live = sim.live_at_peak()
    lines = ["", f"Peak {format_bytes(sim.peak_memory)}: stage {sim.peak_stage}, computing node "
             f"{sim.peak_node} {graph.names[sim.peak_node]!r}; live there "
             f"({len(live)} values, largest first):"]
    for i in sorted(live, key=lambda n: -graph.mem[n])[:15]:
        lines.append(f"  {i:4d} {graph.names[i]!r} {format_bytes(graph.mem[i])}")
    if len(live) > 15:
        lines.append(f"  ... and {len(live) - 15} more")
    return lines


def _replayed(step) -> list[str]:
    nodes = [n for n in step.module.graph.nodes if n.name.startswith("rng_state_")]
    if not nodes:
        return []
    names = ", ".join(n.name[len("rng_state_"):] for n in nodes)
    return ["", f"Random ops recomputed with their saved generator state: {names}"]
