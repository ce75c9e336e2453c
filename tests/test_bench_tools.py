"""The benchmark's own tools: bench_bounds' rows per seed, compare_bounds' verdicts."""
import csv

import remat
from bench import bench_bounds, compare_bounds


def _row(graph, budget, cost, bound="1.0", seed=0, seconds="1.0"):
    return dict(graph=graph, T="10", budget=budget, method="auto", status="feasible",
                cost=cost, bound=bound, gap="", seconds=seconds, chosen="", seed=seed)


def _write(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def test_a_row_moves_only_where_the_ranges_over_seeds_part(tmp_path):
    before = _write(tmp_path / "before.csv", [
        _row("a", "20%", "1.20", seed=0), _row("a", "20%", "1.10", seed=1),
        _row("b", "20%", "1.30", seed=0), _row("b", "20%", "1.25", seed=1),
        _row("c", "20%", "1.05", seed=0), _row("c", "20%", "1.05", seed=1),
        _row("d", "20%", ""), _row("e", "20%", "1.5")])
    after = _write(tmp_path / "after.csv", [
        _row("a", "20%", "1.15", seed=0), _row("a", "20%", "1.05", seed=1),  # overlaps
        _row("b", "20%", "1.20", seed=0), _row("b", "20%", "1.22", seed=1),  # all below
        _row("c", "20%", "1.06", seed=0), _row("c", "20%", "1.07", seed=1),  # all above
        _row("d", "20%", "1.4"), _row("e", "20%", "")])
    lines, counts, (old, new, rows) = compare_bounds.compare(
        compare_bounds.load(before, "auto"), compare_bounds.load(after, "auto"), 1e-3)
    assert counts == {"within": 1, "lower": 1, "higher": 1, "schedule": 1, "lost": 1}
    assert any(line.startswith("b 20%: 1.250000-1.300000 -> 1.200000-1.220000") for line in lines)
    assert rows == 3  # a, b, c: a cost and a bound on both sides
    assert old > new  # medians: a 1.15 -> 1.10, b 1.275 -> 1.21, c 1.05 -> 1.065


def test_bench_bounds_runs_a_row_per_seed(monkeypatch):
    """Each row records its seed, and the solver is called with it."""
    graph, called, real = remat.graphs.random_dag(12, seed=3), [], bench_bounds.solver
    monkeypatch.setattr(bench_bounds, "solver", lambda name: lambda g, budget, options: (
        called.append((name, options.seed)) or real(name)(g, budget, options)))
    rows = [row for seed in (0, 1) for row in bench_bounds.rows_for(
        "g", graph, "80%", 2.0, 0, ("retention", "auto"), seed)]
    runs = [("retention", 0), ("auto", 0), ("retention", 1), ("auto", 1)]
    assert [(r["method"], r["seed"]) for r in rows] == runs and called == runs
    assert all(r["cost"] is not None and r["cost"] >= r["bound"] - 1e-9 for r in rows)
