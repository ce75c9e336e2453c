"""The one simulator, R/S derivation, budgets and Solution JSON, on hand-worked graphs."""
import re

import numpy as np
import pytest

import remat
from remat import InvalidScheduleError, RematGraph, simulate
from remat.schedule import cheapest_r, checkpoint_all, parse_budget, s_from_r, tighten
from remat.schedule.budget import BudgetError, budget_percent
from remat.schedule.simulate import restaged, restaged_all, stage_peaks


def chain():
    """a -> b -> loss, then grad_b (reads loss, b, a) and grad_a (reads grad_b, a)."""
    return RematGraph(["a", "b", "loss", "grad_b", "grad_a"], [1, 2, 1, 4, 3], [2, 3, 1, 4, 5],
                      [[], [0], [1], [0, 1, 2], [0, 3]], [False, False, False, True, True],
                      static_mem=10)


def diamond():
    """x feeds y and z, which both feed w."""
    return RematGraph(["x", "y", "z", "w"], [1, 1, 1, 1], [4, 1, 1, 2], [[], [0], [0], [1, 2]],
                      [False] * 4)


def skip():
    """a -> b -> c, and c also reads a (a skip connection); a is large."""
    return RematGraph(["a", "b", "c", "d"], [5, 1, 1, 1], [8, 1, 1, 1], [[], [0], [0, 1], [2]],
                      [False] * 4)


def test_chain_checkpoint_all_by_hand():
    # stage 0: 10 + a(2) = 12; 1: + b(3) = 15; 2: + loss(1) = 16;
    # 3: + grad_b(4) = 20, then loss and b are read for the last time: 16;
    # 4: + grad_a(5) = 21, then everything goes: 10.
    peak, cost, timeline = simulate(chain(), *checkpoint_all(chain()))
    assert peak == 21 and cost == 11
    assert [e.memory for e in timeline if e.action == "compute"] == [12, 15, 16, 20, 21]
    assert timeline[-1].memory == 10


def test_chain_recompute_by_hand():
    # drop b after the loss and recompute it for grad_b: stage 3 starts with a and loss
    # resident (13), recomputes b (16), computes grad_b (20), then frees loss and b (16).
    g = chain()
    S = np.zeros((5, 5), dtype=bool)
    S[1, 0] = S[2, 0] = S[3, 0] = S[4, 0] = True  # a kept throughout
    S[2, 1] = True  # b kept for the loss only
    S[3, 2] = True  # loss kept for grad_b
    S[4, 3] = True  # grad_b kept for grad_a
    R = cheapest_r(g, S)
    assert np.flatnonzero(R[3]).tolist() == [1, 3]
    sim = simulate(g, R, S)
    computes = [e.memory for e in sim.timeline if e.action == "compute"]
    assert computes == [12, 15, 16, 16, 20, 21]
    assert sim.compute_cost == 11 + 2 and sim.peak_memory == 21


def test_diamond_by_hand():
    # x(4); y: 5; z: 6, then x is dead: 2; w: 4, then all free.
    sim = simulate(diamond(), *checkpoint_all(diamond()))
    assert sim.peak_memory == 6 and (sim.peak_stage, sim.peak_node) == (2, 2)
    assert sim.live_at_peak() == [0, 1, 2]


def test_skip_connection_by_hand():
    # keeping a: a(8); b: 9; c: 10, then a and b die: 1; d: 2.  Peak 10.
    g = skip()
    assert simulate(g, *checkpoint_all(g)).peak_memory == 10
    # dropping a after b and recomputing it for c does not help: at c, a(8)+b(1)+c(1) again
    S = np.zeros((4, 4), dtype=bool)
    S[1, 0] = S[2, 1] = S[3, 2] = True
    R = cheapest_r(g, S)
    sim = simulate(g, R, S)
    assert R[2].tolist() == [True, False, True, False]
    assert sim.peak_memory == 10 and sim.compute_cost == 8 + 5


def test_unread_unkept_resident_values_are_freed_at_stage_start():
    g = diamond()
    R, S = checkpoint_all(g)
    S = S.copy()
    S[3, 0] = True  # x resident at stage 3 start but not read there and not kept
    S[2, 0] = True
    sim = simulate(g, R, S)
    stage3 = [e for e in sim.timeline if e.stage == 3]
    assert stage3[0] == ("free", 0) or (stage3[0].action, stage3[0].node) == ("free", 0)


def test_missing_dependency_names_stage_and_nodes():
    g = chain()
    R, S = checkpoint_all(g)
    S = S.copy()
    S[3, 1] = False
    with pytest.raises(InvalidScheduleError, match=r"stage 3: node 3 'grad_b' needs node 1 'b'"):
        simulate(g, R, S)


@pytest.mark.parametrize("edit, message", [
    (lambda R, S: R.__setitem__((2, 2), False), r"stage 2 must compute its own node 2 'loss'"),
    (lambda R, S: R.__setitem__((1, 3), True), "comes after node 1"),
    (lambda R, S: S.__setitem__((1, 1), True), "not computed before stage 1"),
    (lambda R, S: (S.__setitem__((3, 1), False), S.__setitem__((4, 1), True)),
     "resident at the start of stage 4 but was neither resident nor computed in stage 3"),
])
def test_structural_errors(edit, message):
    g = chain()
    R, S = (m.copy() for m in checkpoint_all(g))
    edit(R, S)
    with pytest.raises(InvalidScheduleError, match=message):
        simulate(g, R, S)


def test_bad_shapes_and_values():
    g = chain()
    with pytest.raises(InvalidScheduleError, match="shape"):
        simulate(g, np.eye(3), np.zeros((3, 3)))
    with pytest.raises(InvalidScheduleError, match="0/1"):
        simulate(g, np.eye(5) * 2, np.zeros((5, 5)))


def test_s_from_r_and_tighten_are_fixed_points():
    g = remat.graphs.random_dag(15, seed=4)
    R, S = checkpoint_all(g)
    assert np.array_equal(cheapest_r(g, S), R)
    R2, S2 = tighten(g, np.tril(np.ones((g.size, g.size), dtype=bool), -1))
    assert np.array_equal(R2, R) and np.array_equal(S2, S)
    assert np.array_equal(s_from_r(g, R), S)


@pytest.fixture(params=["c", "numpy"])
def rs_in(request, monkeypatch):
    """``cheapest_r`` and ``s_from_r`` in C and in numpy."""
    from remat.schedule import rs

    if request.param == "c":
        assert rs.COMPILED, "the C extension remat/schedule/_rs_c.c was not built (make setup)"
    monkeypatch.setattr(rs, "COMPILED", request.param == "c")
    return request.param


@pytest.mark.parametrize("seed", range(6))
def test_s_from_r_keeps_each_value_from_its_last_computation_to_each_read(seed, rs_in):
    """The definition, checked cell by cell on random recomputations: S[t, d] exactly where
    d is read in a later-or-equal stage r (from outside r: not computed in r) with no
    computation of d in stages t..r; and (R, S) is valid."""
    g = remat.graphs.random_dag(12, seed=seed)
    rng = np.random.default_rng(seed)
    R = np.eye(g.size, dtype=bool) | np.tril(rng.random((g.size, g.size)) < 0.15, -1)
    S = s_from_r(g, R)
    for d in range(g.size):
        for t in range(g.size):
            covering = [r for r in range(t, g.size)
                        if any(R[r, k] for k in g.users[d]) and not R[r, d]
                        and not R[t:r + 1, d].any()]
            assert S[t, d] == bool(covering), (t, d)
    simulate(g, R, S)


@pytest.mark.parametrize("seed", range(6))
def test_cheapest_r_computes_what_s_forces_and_its_missing_inputs(seed, rs_in):
    """The definition, stage by stage on random residencies: node t, each value kept into
    stage t+1 that is not resident at stage t, and (searched by hand) every input of those
    that is neither resident nor already among them."""
    g = remat.graphs.random_dag(12, seed=seed)
    rng = np.random.default_rng(seed)
    S = np.tril(rng.random((g.size, g.size)) < 0.4, -1)
    R = cheapest_r(g, S)
    for t in range(g.size):
        wanted = {t} | {v for v in range(t) if t + 1 < g.size and S[t + 1, v] and not S[t, v]}
        row, stack = set(), list(wanted)
        while stack:
            k = stack.pop()
            if k not in row:
                row.add(k)
                stack += [d for d in g.deps[k] if not S[t, d]]
        assert set(np.flatnonzero(R[t]).tolist()) == row, t


def test_s_from_r_names_a_read_before_any_computation(rs_in):
    g = chain()
    R = np.eye(5, dtype=bool)
    R[0, 0] = False
    with pytest.raises(InvalidScheduleError, match="stage 1: .*'b'.* reads .*'a'.* before any"):
        s_from_r(g, R)


@pytest.mark.parametrize("seed", range(8))
def test_cheapest_r_and_s_from_r_in_c_equal_numpy(seed, monkeypatch):
    """The C functions (setup.py) give numpy's matrices on random schedules of 61-201 nodes,
    also from views that are not contiguous, and name the same first read where R computes
    values too late."""
    from remat.schedule import rs

    assert rs.COMPILED, "the C extension remat/schedule/_rs_c.c was not built (make setup)"
    g = remat.graphs.random_dag(30 + 10 * seed, seed=seed)
    rng = np.random.default_rng(seed)
    size = g.size
    S = np.tril(rng.random((size, size)) < 0.3, -1)
    assert np.array_equal(cheapest_r(g, S), rs._cheapest_r(g, S))
    R = np.eye(size, dtype=bool) | np.tril(rng.random((size, size)) < 0.05, -1)
    assert np.array_equal(s_from_r(g, R), rs._s_from_r(g, R))
    wide = np.zeros((size, 2 * size), dtype=bool)
    wide[:, ::2] = S
    assert np.array_equal(cheapest_r(g, wide[:, ::2]), rs._cheapest_r(g, S))
    wide[:, ::2] = R
    assert np.array_equal(s_from_r(g, wide[:, ::2]), rs._s_from_r(g, R))
    late = R.copy()
    for v in sorted({d for k in range(size) for d in g.deps[k]})[:3]:  # all read before the end
        late[:, v] = False
        late[size - 1, v] = True  # computed only in the last stage: its readers come first
    found = {}
    for compiled in (True, False):
        monkeypatch.setattr(rs, "COMPILED", compiled)
        with pytest.raises(InvalidScheduleError) as caught:
            s_from_r(g, late)
        found[compiled] = (str(caught.value), tighten(g, S))
    assert found[True][0] == found[False][0]
    assert all(np.array_equal(c, p) for c, p in zip(found[True][1], found[False][1]))


@pytest.mark.parametrize("seed", range(6))
def test_tighten_from_a_fixed_point_equals_tighten(seed):
    """``tighten`` from ``base`` (in C, deriving again only what a move changes) reaches
    tighten's own fixed point on random moves of 8-47 node graphs (a value kept or freed over
    a run of stages, one to three at once or one per node, from a fixed point that follows
    the moves), and raises tighten's error where S keeps a value at or after its own stage."""
    from remat.schedule import rs

    assert rs.COMPILED, "the C extension remat/schedule/_rs_c.c was not built (make setup)"
    rng = np.random.default_rng(seed)
    for k in range(40):
        g = remat.graphs.random_dag(8 + (7 * k + seed) % 40, seed=100 * seed + k)
        size = g.size
        base = tighten(g, np.tril(rng.random((size, size)) < 0.3, -1))
        for step in range(12):
            S = base[1].copy()
            for _ in range(size if step == 11 else 1 + step % 3):
                v = rng.integers(size)
                first = rng.integers(v + 1, size + 1)
                S[first:rng.integers(first, size + 1), v] = rng.random() < 0.5
            expected = tighten(g, S)
            found = tighten(g, S, base)
            assert all(np.array_equal(e, f) for e, f in zip(expected, found)), (k, step)
            if step % 4 == 3:
                base = expected
    S = base[1].copy()
    S[size // 2, size // 2] = True
    with pytest.raises(InvalidScheduleError) as caught:
        tighten(g, S)
    with pytest.raises(InvalidScheduleError, match=re.escape(str(caught.value))):
        tighten(g, S, base)


def test_recomputing_a_resident_value_replaces_it():
    g = diamond()
    R, S = checkpoint_all(g)
    R = R.copy()
    R[2, 0] = True  # recompute x while it is still resident
    sim = simulate(g, R, S)
    assert sim.compute_cost == 5
    # stage 2: 5 (x, y) + new x 4 = 9, old copy dropped: 5; z: 6; x, y... at the end 2
    computes = [e.memory for e in sim.timeline if e.stage == 2 and e.action == "compute"]
    assert computes == [9, 6]


def test_plan_frees_everything_and_computes_per_r():
    g = remat.graphs.unet(3)
    sol = remat.solve(g, "100%", method="checkpoint-all")
    computed = [i for a, i in sol.plan if a == "compute"]
    freed = [i for a, i in sol.plan if a == "free"]
    assert sorted(computed) == sorted(freed) == list(range(g.size))


@pytest.mark.parametrize("text, expected", [
    (1000, 1000.0), (2.5e9, 2.5e9), ("1000", 1000.0), ("1.5GiB", 1.5 * 2**30),
    ("800MB", 800e6), ("800 mb", 800e6), ("4KiB", 4096.0), ("1e3B", 1000.0),
])
def test_budget_units(text, expected):
    assert parse_budget(text) == pytest.approx(expected)


def test_budget_percentages():
    g = chain()  # static 10, checkpoint-all peak 21
    assert parse_budget("100%", g) == 21
    assert parse_budget("50%", g) == pytest.approx(15.5)
    assert parse_budget("0.5%", g) == pytest.approx(10.055)
    for percent in (100.0, 50.0, 0.5, 130.0):
        assert budget_percent(parse_budget(f"{percent}%", g), g) == pytest.approx(percent)


@pytest.mark.parametrize("bad, message", [
    ("12XB", "unknown unit 'XB'"), ("-5%", "cannot read budget"), ("", "cannot read budget"),
    ("0%", "above 0%"), (0, "positive"), (-3, "positive"), (float("nan"), "positive"),
    (True, "got True"), (None, "got None"), ([1], "number or a string"), ("60%", "needs the graph"),
])
def test_bad_budgets(bad, message):
    with pytest.raises(BudgetError, match=message):
        parse_budget(bad)
    assert issubclass(BudgetError, remat.RematError)


def test_solution_json_roundtrip(tmp_path):
    g = remat.graphs.linear(16)
    sol = remat.solve(g, "80%", method="chen-greedy")
    back = remat.Solution.from_json(sol.to_json(tmp_path / "s.json"))
    assert back.method == "chen-greedy" and back.status == sol.status
    assert np.array_equal(back.R, sol.R) and np.array_equal(back.S, sol.S)
    assert back.plan == sol.plan and back.peak_memory == sol.peak_memory
    assert back.budget == pytest.approx(sol.budget)
    back.check(g)
    with pytest.raises(InvalidScheduleError, match="another graph"):
        back.check(remat.graphs.linear(16, unit=True))


def test_auto_reports_its_choice_as_the_simulator_does():
    """auto relabels its chosen schedule instead of simulating it again: the cost, peak and
    plan are the simulator's for that R and S, the bound at most the cost."""
    g = remat.graphs.linear(24)
    sol = remat.solve(g, "40%", method="auto", time_limit=10)
    sim = simulate(g, sol.R, sol.S)
    assert sol.method == "auto" and sol.details["chosen"] != "auto"
    assert sol.compute_cost == sim.compute_cost and sol.peak_memory == sim.peak_memory
    assert sol.plan == sim.plan and sol.lower_bound <= sol.compute_cost
    with pytest.raises(ValueError, match="status"):
        sol.relabelled(g, "auto", "infeasible", sol.budget)


def test_broken_solution_json():
    with pytest.raises(InvalidScheduleError, match="remat-solution/1"):
        remat.Solution.from_json('{"format": "remat-graph/1"}')
    with pytest.raises(InvalidScheduleError, match="malformed"):
        remat.Solution.from_json('{"format": "remat-solution/1", "T": 2}')


def _replay_by_hand(graph, R, S):
    """DESIGN.md's memory rule written out event by event, as a plain loop: the reference
    the simulator's numpy replay must equal (events, peak, its stage and node)."""
    size, mem, ws = graph.size, graph.mem, graph.workspace
    alive, used, events = set(), float(graph.static_mem), []
    peak, at = float(graph.static_mem), (-1, -1)
    for t in range(size):
        keep = S[t + 1] if t + 1 < size else np.zeros(size, dtype=bool)
        computed = np.flatnonzero(R[t]).tolist()
        reads = {}
        for k in computed:
            for d in graph.deps[k]:
                reads[d] = reads.get(d, 0) + 1
        for v in np.flatnonzero(S[t]).tolist():
            if (not keep[v] or R[t, v]) and reads.get(v, 0) == 0:
                alive.discard(v)
                used -= mem[v]
                events.append((t, "free", v, used))
        for k in computed:
            candidate = used + mem[k] + ws[k]
            if candidate > peak or at[0] < 0:
                peak, at = max(candidate, peak), (t, k)
            events.append((t, "compute", k, candidate))
            if k not in alive:
                used += mem[k]
                alive.add(k)
            for d in graph.deps[k]:
                reads[d] -= 1
                if reads[d] == 0 and not keep[d] and d in alive:
                    alive.discard(d)
                    used -= mem[d]
                    events.append((t, "free", d, used))
            if reads.get(k, 0) == 0 and not keep[k]:
                alive.discard(k)
                used -= mem[k]
                events.append((t, "free", k, used))
    return events, peak, at


def _random_schedule(graph, rng):
    """A random valid (R, S): random residencies, what they force, then resident values
    computed again at random (a copy replacing a resident one, kept or not)."""
    size = graph.size
    S = np.tril(rng.random((size, size)) < rng.uniform(0.1, 0.9), -1)
    S[1:] &= S[:-1] | np.eye(size, dtype=bool)[:-1]  # kept only if resident or computed before
    R = cheapest_r(graph, S)
    for t, v in zip(*np.nonzero(S & (rng.random((size, size)) < 0.2))):
        if all(S[t, d] or R[t, d] for d in graph.deps[v]):
            R[t, v] = True
    return R, S


@pytest.mark.parametrize("seed", range(8))
def test_the_simulator_replays_the_rule_written_out(seed):
    rng = np.random.default_rng(seed)
    graphs = [remat.graphs.random_dag(12, seed=seed), remat.graphs.unet(2),
              remat.graphs.linear(6), chain(), diamond(), skip()]
    for graph in graphs:
        graph = graph.with_workspace(rng.integers(0, 3, graph.size) * (seed % 2))
        for _ in range(10):
            R, S = _random_schedule(graph, rng)
            sim = simulate(graph, R, S)
            events, peak, at = _replay_by_hand(graph, R, S)
            assert [tuple(e) for e in sim.timeline] == events
            assert (sim.peak_memory, (sim.peak_stage, sim.peak_node)) == (peak, at)
            assert sim.plan == [(action, node) for _, action, node, _ in events]
            assert sim.compute_cost == pytest.approx(float((R.sum(0) * graph.cost).sum()))


def _stage_peaks_by_hand(graph, R, S):
    """Each stage's largest compute candidate in the rule written out (``_replay_by_hand``)."""
    peaks = np.zeros(graph.size)
    for t, action, _, memory in _replay_by_hand(graph, R, S)[0]:
        if action == "compute":
            peaks[t] = max(peaks[t], memory)
    return peaks


@pytest.mark.parametrize("seed", range(6))
def test_stage_peaks_replays_any_set_of_stages_alone(seed):
    rng = np.random.default_rng(seed)
    for graph in (remat.graphs.random_dag(14, seed=seed), remat.graphs.unet(2), skip()):
        graph = graph.with_workspace(rng.integers(0, 3, graph.size) * (seed % 2))
        for _ in range(8):
            R, S = _random_schedule(graph, rng)
            by_hand = _stage_peaks_by_hand(graph, R, S)
            assert np.array_equal(stage_peaks(graph, R, S), by_hand)
            rows = np.flatnonzero(rng.random(graph.size) < 0.4)  # runs and gaps
            assert np.array_equal(stage_peaks(graph, R, S, rows), by_hand[rows])
            rows = rng.integers(0, graph.size, 5)  # any order, repeats
            assert np.array_equal(stage_peaks(graph, R, S, rows), by_hand[rows])
            assert stage_peaks(graph, R, S, []).size == 0


@pytest.mark.parametrize("seed", range(6))
def test_restaged_equals_a_full_replay_after_any_valid_change(seed):
    """``restaged`` replays only the stages a change touched (R, S, or what the stage keeps);
    on random schedules (copies of resident values computed again included) changed in R
    alone, in a run of stages of one value, or by a computed copy made resident and kept,
    its peaks equal a full simulation's."""
    rng = np.random.default_rng(seed)
    checked = 0
    for graph in (remat.graphs.random_dag(16, seed=seed), remat.graphs.unet(2), skip()):
        for _ in range(30):
            R, S = _random_schedule(graph, rng)
            peaks = simulate(graph, R, S).stage_peaks(graph.size)
            R2, S2 = _changed(graph, R, S, rng)
            try:
                full = simulate(graph, R2, S2).stage_peaks(graph.size)
            except InvalidScheduleError:
                continue
            assert np.array_equal(restaged(graph, R2, S2, (R, S, peaks)), full)
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("seed", range(4))
def test_restaged_all_replays_many_changes_of_one_schedule_at_once(seed):
    """``restaged_all``: the changed stages of many schedules in one replay; each one's peaks
    equal a full simulation's (``_changed``'s changes of one random schedule)."""
    rng = np.random.default_rng(seed)
    for graph in (remat.graphs.random_dag(16, seed=seed), remat.graphs.unet(2), skip()):
        R, S = _random_schedule(graph, rng)
        peaks = simulate(graph, R, S).stage_peaks(graph.size)
        changed, full = [], []
        while len(changed) < 12:
            R2, S2 = _changed(graph, R, S, rng)
            try:
                full.append(simulate(graph, R2, S2).stage_peaks(graph.size))
            except InvalidScheduleError:
                continue
            changed.append((R2, S2))
        found = restaged_all(graph, changed, (R, S, peaks))
        assert len(found) == len(full)
        assert all(np.array_equal(f, p) for f, p in zip(found, full))
        assert restaged_all(graph, [], (R, S, peaks)) == []


def _changed(graph, R, S, rng):
    """(R, S) changed in R alone, in a run of stages of one value, or by a computed copy made
    resident and kept (not always valid)."""
    R2, S2 = R.copy(), S.copy()
    s, v = sorted(rng.integers(0, graph.size, 2))
    end = min(graph.size, s + int(rng.integers(1, 4)))
    copies = np.argwhere(R[1:-1] & (R[:-2] | S[:-2]) & ~S[1:-1])  # computed in t-1 too
    kind = rng.integers(3)
    if kind == 0:
        R2[s, v] = not R2[s, v]
    elif kind == 1 or not len(copies):
        S2[s:end, v] = rng.random() < 0.5
    else:  # a value computed again made resident and kept
        s, v = copies[rng.integers(len(copies))]
        S2[s + 1:s + 3, v] = True
    return R2, S2
