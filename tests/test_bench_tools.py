"""The benchmark's own tools: bench_bounds' rows per seed, compare_bounds' verdicts."""
import csv
import sys
from pathlib import Path

import remat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/ is not installed
from bench import bench_bounds, compare_bounds  # noqa: E402


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
        _row("d", "20%", ""), _row("e", "20%", "1.5"), _row("f", "20%", ""),
        _row("g", "20%", "1.2000"),
        _row("h", "20%", "1.3", seed=0), _row("h", "20%", "1.3", seed=1)])
    after = _write(tmp_path / "after.csv", [
        _row("a", "20%", "1.15", seed=0), _row("a", "20%", "1.05", seed=1),  # overlaps
        _row("b", "20%", "1.20", seed=0), _row("b", "20%", "1.22", seed=1),  # all below
        _row("c", "20%", "1.06", seed=0), _row("c", "20%", "1.07", seed=1),  # all above
        _row("d", "20%", "1.4"), _row("e", "20%", ""), _row("f", "20%", ""),
        _row("g", "20%", "1.1990"),  # lower by less than the tolerance
        _row("h", "20%", "1.2", seed=0), _row("h", "20%", "", seed=1)])  # one run of two lost
    lines, counts, (old, new, rows) = compare_bounds.compare(
        compare_bounds.load(before, "auto"), compare_bounds.load(after, "auto"), 1e-3)
    assert counts == {"within": 2, "lower": 1, "higher": 1, "schedule": 1, "lost": 2, "none": 1}
    assert any(line.startswith("b 20%: 1.250000-1.300000 -> 1.200000-1.220000") for line in lines)
    assert rows == 5  # a, b, c, g, h: a cost and a bound on both sides
    assert old > new  # a, b, g and h lower, c higher


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
