"""The `remat` command line, called in-process."""
import json

import pytest

import remat
from remat.cli.main import main


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "g.json"
    remat.graphs.linear(10).to_json(path)
    return str(path)


def test_solve_prints_a_table(graph_file, capsys):
    assert main(["solve", graph_file, "--budget", "80%", "--method", "chen-greedy"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["method", "status", "peak", "budget"]
    assert "chen-greedy" in out and "x" in out


def test_solve_takes_a_synthetic_spec(capsys):
    """`remat solve linear:8` (the README says solve and sweep take them; solve read only
    JSON files)."""
    assert main(["solve", "linear:8", "--budget", "80%", "--method", "chen-greedy"]) == 0
    assert "chen-greedy" in capsys.readouterr().out


def test_solve_json_and_output_file(graph_file, tmp_path, capsys):
    target = tmp_path / "s.json"
    assert main(["solve", graph_file, "--budget", "100%", "--method", "checkpoint-all",
                 "--json", "-o", str(target)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "optimal" and doc["overhead"] == 1
    assert remat.Solution.from_json(target).status == "optimal"


def test_solve_all_methods(graph_file, capsys):
    assert main(["solve", graph_file, "--budget", "85%", "--method", "all"]) == 0
    out = capsys.readouterr().out
    for method in ("checkpoint-all", "chen-sqrtn", "chen-greedy", "ap-greedy", "griewank"):
        assert method in out


def test_errors_are_reported_not_raised(graph_file, tmp_path, capsys):
    assert main(["solve", graph_file, "--budget", "12XB"]) == 1
    assert "unknown unit 'XB'" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert main(["solve", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["solve", graph_file, "--method", "nope"]) == 1
    assert "unknown method 'nope'; valid methods:" in capsys.readouterr().err


def test_infeasible_exit_code(graph_file, capsys):
    # a heuristic that finds nothing proves nothing; auto proves 1% below the least peak
    assert main(["solve", graph_file, "--budget", "1%", "--method", "chen-greedy"]) == 3
    out = capsys.readouterr().out
    assert "no schedule" in out and "infeasible" not in out
    assert main(["solve", graph_file, "--budget", "1%", "--method", "auto"]) == 3
    assert "infeasible" in capsys.readouterr().out


def test_sweep_writes_csv_json_png(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "linear:8", "--methods", "checkpoint-all,chen-greedy",
                 "--budgets", "50,100", "-o", str(out)]) == 0
    lines = (out / "sweep.csv").read_text().splitlines()
    assert len(lines) == 1 + 4
    assert json.loads((out / "sweep.json").read_text())["command"].startswith("remat")
    assert (out / "sweep.png").stat().st_size > 1000


def test_largest_batch_search_is_exact_and_bounded():
    from remat.bench.maxbatch import largest_batch

    for true_max in (0, 1, 2, 7, 8, 9, 100):
        probed = []

        def fits(b):
            probed.append(b)
            return b <= true_max

        assert largest_batch(fits, limit=64) == min(true_max, 64)
        assert len(probed) <= 16
        assert largest_batch(fits, start=32, limit=64) == min(true_max, 64)
