"""Checkmate's MILP as sparse arrays: one short method per constraint family.

Variables (one stage per node, as in Checkmate):

- ``R[t, i]`` (i <= t): node i is computed in stage t; ``R[t, t]`` is fixed to 1.
- ``S[t, i]`` (i < t): value i is resident when stage t starts.
- ``FREE[t, i, k]`` (k <= t, i a dependency of k or k itself): value i is freed right after
  stage t computes k, i.e. ``R[t,k] AND NOT S[t+1,i] AND NOT R[t,j]`` for every user j of i
  with k < j <= t.
- ``U[t, k]`` (k <= t): memory (above ``static_mem``) when stage t computes k: the candidate
  peak of DESIGN.md's memory rule, ``sum_i S[t,i] m_i + sum_{j<=k} R[t,j] m_j - frees before
  k``, less node k's transient workspace ``w_k``; ``U[t,k] + w_k R[t,k]`` is bounded by the
  budget (the U column itself too, which matters only for ``w_k = 0``).

Objective: ``sum_t sum_i c_i R[t, i]``.

Exactness with the simulator. ``U[t, k]`` is exactly the simulator's candidate for computing k
in stage t (inputs alive, output allocated, earlier values freed after their last read in the
stage unless kept), given two restrictions that every optimal schedule can meet:

- ``R[t,i] + S[t,i] <= 1``: never recompute a resident value. The simulator allows it (the new
  copy replaces the old one), but dropping that recompute keeps every read satisfied (the
  resident copy serves them) with no more memory and no more cost, so it is a sound dominance
  constraint.
- ``S[t,i] <= S[t+1,i] + sum_{users j <= t} R[t,j]``: keep a value into stage t only if stage t
  reads it or keeps it further. The simulator frees such a value at the stage start, which the
  MILP does not model; clearing the S entry (and then, backwards, any S entry that only fed it)
  leaves a valid schedule with the same cost and no more memory, so this is sound as well.

For a ``U[t, k]`` with ``R[t, k] = 0`` the row holds the memory after the previous frees
(no workspace: the term ``w_k R[t,k]`` vanishes), which never exceeds an earlier candidate of
the stage: the previous computation's candidate is that memory plus its frees plus its own
workspace, all >= 0; before the first computation of a stage, the resident values are all
still alive at it (keep-only-if-read: nothing is freed at the stage start), and every stage
computes node t. So bounding every ``U + w R`` is the same as bounding every candidate, and
``U + w R`` is exactly the simulator's candidate, workspace included.

Formulations (``Formulation``), all exact: see the field docstrings for why each is sound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat.graph.core import RematGraph
from remat.solvers.interrupt import requested


@dataclass(frozen=True)
class Formulation:
    """Which encoding and which sound speed-ups the model uses."""

    free_encoding: str = "and"
    """``"bigm"``: Checkmate's rows ``1 - FREE <= hazards`` and ``hazards <= kappa (1 - FREE)``
    (exact only with binary FREE). ``"and"``: the exact AND linearisation ``FREE <= R[t,k]``,
    ``FREE <= 1 - S[t+1,i]``, ``FREE <= 1 - R[t,j]`` per later user j, ``FREE >= R[t,k] -
    S[t+1,i] - sum R[t,j]``; with R and S integral it forces FREE to 0/1 by itself, so FREE may
    be continuous. Its upper-bound rows are the issue's cuts "a freed value is neither kept nor
    used later in that stage"."""
    free_binary: bool = False
    """Declare FREE integer. Needed with ``"bigm"``; redundant with ``"and"`` (see above)."""
    r_binary: bool = True
    """Declare R integer. With S and FREE binary and the "and" encoding, R may be continuous:
    rounding a fractional R down keeps every dependency row (a fractional R[t,k] > 0 can only
    be rounded to 0, and R[t,k] = 1 rows still see R or S at 1), never frees less (FREE = 1
    already needs R[t,j] = 0 for later users), and lowers cost and memory. The returned schedule
    then takes ``cheapest_r(S)``, which is at most that rounding."""
    free_once: bool = False
    """Cut ``sum_k FREE[t,i,k] <= 1``: a value is freed at most once per stage. Valid because
    FREE[t,i,k] = 1 needs R[t,j] = 0 for all later users j of i, while FREE[t,i,j] needs
    R[t,j] = 1: two frees of i in one stage contradict each other."""
    tie_break: float = 0.0
    """Multiply node i's cost by ``1 + tie_break * u_i`` with fixed u_i in [0, 1) (Checkmate's
    perturbation, deterministic), so that fewer schedules tie. The bound on the true cost is
    then HiGHS's bound / (1 + tie_break), rounded up when costs are whole numbers; the
    schedule is priced by the simulator with the true costs (``milp.solve_with``)."""
    free_fixing: bool = False
    """Fix FREE[t,i,k] = 0 when a later user of i in stage t is node t itself (R[t,t] = 1), and
    R[t,i] = 0 / S[t,i] = 0 where no useful schedule can have them (see ``_useless``)."""


PLAIN = Formulation(free_encoding="bigm", free_binary=True, r_binary=True)
"""A direct encoding of Checkmate's MILP (plus the two exactness rows above)."""
TIGHT = Formulation(free_encoding="and", free_binary=False, r_binary=True, free_once=True,
                    free_fixing=True)
"""What ``milp`` uses by default. Measured (bench/bench_milp.py speed; single runs on a loaded
2-core machine, so noisy): against PLAIN it is neither clearly faster nor slower (linear10 unit,
budget 5: 55 s vs 38 s plain; budget 6: 3.1 s vs 6.0 s; linear16 unit, budgets 4-6: neither
proves optimality in 30-60 s). It is kept because it has fewer integer columns (FREE
continuous) and the same optimum. Clearly worse, so off: ``tie_break`` and continuous R."""


BUILD_SECONDS = 4.5e-5
"""Seconds per squared node that building Checkmate's model (``MilpModel``, or its LP
relaxation) takes, before HiGHS sees any time limit: 0.48 s at T = 129 (gpt2 op), 2.1 s at
266 (resnet50 module), 6.3 s at 467 (fcn_resnet50 op), 45 s at 1001 (random_dag(500)).
Where that is more than its time limit ``lp-rounding`` builds no LP, and where it is more
than the time left ``milp``, ``cpsat`` and ``min_budget``'s MILP build no model
(``build_fits``): lp-rounding given 0.1 s took 4.2 / 13.1 / 53.9 s on the last three, milp
given 2 s 3.3 / 4.3 / 16.3 s on gpt2 op, resnet50 module and random_dag(250) at 50%
(bench/results/fast_notes.md, sessions 30 and 31)."""


def build_fits(graph: RematGraph, seconds: float | None) -> bool:
    """Whether ``MilpModel`` of ``graph`` can be built within ``seconds`` (None: no limit);
    never once Ctrl-C asked the solve to stop (``interrupt.requested``): its build alone can
    take seconds, and the solve would be cancelled at once."""
    return not requested() and (seconds is None or BUILD_SECONDS * graph.size ** 2 <= seconds)


class MilpModel:
    """The MILP for ``graph`` within ``budget`` bytes, as arrays ready for HiGHS.

    ``min_peak=True`` builds the companion model that minimises the peak instead (one extra
    variable P >= every U), used for the exact smallest feasible budget.
    """

    def __init__(self, graph: RematGraph, budget: float | None,
                 formulation: Formulation = TIGHT, min_peak: bool = False):
        self.graph = graph
        self.formulation = formulation
        self.size = graph.size
        self.mem_unit = _memory_unit(np.concatenate([graph.mem, graph.workspace]))
        self.mem = graph.mem / self.mem_unit
        self.workspace = graph.workspace / self.mem_unit
        self.limit = np.inf
        self.cost_unit = float(graph.cost.max()) if graph.cost.max() > 0 else 1.0
        self._cols_lower: list[float] = []
        self._cols_upper: list[float] = []
        self._cols_obj: list[float] = []
        self._cols_int: list[int] = []
        self._rows: list[tuple[list[int], list[float], float, float]] = []
        self._add_variables(budget, min_peak)
        self._add_rows()

    # ----- variables ---------------------------------------------------------------------
    def _new(self, lower: float, upper: float, obj: float, integer: bool) -> int:
        self._cols_lower.append(lower)
        self._cols_upper.append(upper)
        self._cols_obj.append(obj)
        self._cols_int.append(int(integer))
        return len(self._cols_lower) - 1

    def _add_variables(self, budget: float | None, min_peak: bool) -> None:
        graph, size, form = self.graph, self.size, self.formulation
        cost = graph.cost / self.cost_unit
        if form.tie_break > 0:  # golden-ratio sequence: spread out, reproducible
            cost = cost * (1 + form.tie_break * ((np.arange(size) * 0.6180339887) % 1.0))
        self.R = np.full((size, size), -1, dtype=np.int64)
        self.S = np.full((size, size), -1, dtype=np.int64)
        self.U = np.full((size, size), -1, dtype=np.int64)
        self.free: dict[tuple[int, int, int], int] = {}
        useless = _useless(graph) if form.free_fixing else np.zeros((size, size), dtype=bool)
        for t in range(size):
            for i in range(t + 1):
                fixed = 1.0 if i == t else (0.0 if useless[t, i] else 1.0)
                lower = 1.0 if i == t else 0.0
                self.R[t, i] = self._new(lower, fixed, 0.0 if min_peak else cost[i], form.r_binary)
            for i in range(t):
                self.S[t, i] = self._new(0.0, 0.0 if useless[t, i] else 1.0, 0.0, True)
        for t in range(size):
            for k in range(t + 1):
                for i in graph.deps[k] + (k,):
                    never = form.free_fixing and t in self.later_users(i, k, t)
                    self.free[t, i, k] = self._new(0.0, 0.0 if never else 1.0, 0.0,
                                                   form.free_binary)
        self.limit = limit = np.inf if budget is None else self.scaled_budget(budget)
        for t in range(size):
            for k in range(t + 1):
                self.U[t, k] = self._new(0.0, limit, 0.0, False)
        self.peak_col = self._new(0.0, np.inf, 1.0, False) if min_peak else None

    def scaled_budget(self, budget: float) -> float:
        """The U bound for ``budget`` bytes. With whole-byte sizes every peak is a whole number
        of bytes, so half a byte of slack makes HiGHS's feasibility tolerance harmless: any
        schedule it accepts fits ``budget`` exactly, and none that fits is cut off."""
        room = float(budget) - self.graph.static_mem
        if self.integral_bytes():
            room = float(np.floor(room + 1e-9)) + 0.5 if room >= 0 else -1.0
        return room / self.mem_unit

    def integral_bytes(self) -> bool:
        sizes = np.concatenate([self.graph.mem, self.graph.workspace])
        return bool(np.all(sizes == np.round(sizes)))

    def later_users(self, i: int, k: int, t: int) -> list[int]:
        """Users j of value i with k < j <= t: the reads in stage t that come after k."""
        return [j for j in self.graph.users[i] if k < j <= t]

    # ----- rows --------------------------------------------------------------------------
    def _row(self, cols: list[int], vals: list[float], lower: float, upper: float) -> None:
        self._rows.append((cols, vals, lower, upper))

    def _add_rows(self) -> None:
        self._dependency_rows()
        self._keep_rows()
        self._dominance_rows()
        self._memory_rows()
        self._workspace_rows()
        if self.formulation.free_encoding == "bigm":
            self._free_rows_bigm()
        else:
            self._free_rows_and()
        if self.formulation.free_once:
            self._free_once_rows()
        if self.peak_col is not None:
            for col in self.U[self.U >= 0]:
                self._row([int(col), self.peak_col], [1.0, -1.0], -np.inf, 0.0)

    def _workspace_rows(self) -> None:
        """The candidate of computing k, ``U[t,k] + w_k R[t,k]``, within the budget (or below
        the peak variable); only nodes with workspace need the row, the U bound covers the rest."""
        for k in np.flatnonzero(self.workspace > 0):
            k = int(k)
            for t in range(k, self.size):
                cols, vals = [self.U[t, k], self.R[t, k]], [1.0, float(self.workspace[k])]
                if self.peak_col is not None:
                    self._row(cols + [self.peak_col], vals + [-1.0], -np.inf, 0.0)
                elif np.isfinite(self.limit):
                    self._row(cols, vals, -np.inf, self.limit)

    def _dependency_rows(self) -> None:
        """A node computed in stage t finds each input resident or computed before it."""
        for t in range(self.size):
            for k in range(t + 1):
                for i in self.graph.deps[k]:
                    self._row([self.R[t, k], self.R[t, i], self.S[t, i]], [1.0, -1.0, -1.0],
                              -np.inf, 0.0)

    def _keep_rows(self) -> None:
        """A value resident at stage t+1 was resident or computed in stage t."""
        for t in range(self.size - 1):
            for i in range(t + 1):
                cols, vals = [self.S[t + 1, i], self.R[t, i]], [1.0, -1.0]
                if i < t:
                    cols.append(self.S[t, i])
                    vals.append(-1.0)
                self._row(cols, vals, -np.inf, 0.0)

    def _dominance_rows(self) -> None:
        """R + S <= 1 and keep-only-if-read (module docstring: both sound, both needed for
        the MILP's memory to equal the simulator's)."""
        for t in range(1, self.size):
            for i in range(t):
                self._row([self.R[t, i], self.S[t, i]], [1.0, 1.0], -np.inf, 1.0)
                readers = [self.R[t, j] for j in self.graph.users[i] if j <= t]
                cols = [self.S[t, i]] + readers
                vals = [1.0] + [-1.0] * len(readers)
                if t + 1 < self.size:
                    cols.append(self.S[t + 1, i])
                    vals.append(-1.0)
                self._row(cols, vals, -np.inf, 0.0)

    def _memory_rows(self) -> None:
        """U[t,0] = resident + m_0 R[t,0]; U[t,k] = U[t,k-1] + m_k R[t,k] - frees after k-1."""
        mem = self.mem
        for t in range(self.size):
            cols = [self.U[t, 0], self.R[t, 0]] + [self.S[t, i] for i in range(t)]
            vals = [1.0, -mem[0]] + [-mem[i] for i in range(t)]
            self._row(cols, vals, 0.0, 0.0)
            for k in range(1, t + 1):
                cols = [self.U[t, k], self.U[t, k - 1], self.R[t, k]]
                vals = [1.0, -1.0, -mem[k]]
                for i in self.graph.deps[k - 1] + (k - 1,):
                    cols.append(self.free[t, i, k - 1])
                    vals.append(mem[i])
                self._row(cols, vals, 0.0, 0.0)

    def _hazards(self, t: int, i: int, k: int) -> tuple[list[int], list[float]]:
        """Columns and coefficients of ``S[t+1,i] + sum_j R[t,j] - R[t,k]`` (Checkmate's
        hazards, minus the constant 1)."""
        cols, vals = [self.R[t, k]], [-1.0]
        if t + 1 < self.size:
            cols.append(self.S[t + 1, i])
            vals.append(1.0)
        for j in self.later_users(i, k, t):
            cols.append(self.R[t, j])
            vals.append(1.0)
        return cols, vals

    def _free_rows_bigm(self) -> None:
        """Checkmate's big-M rows: no hazard forces FREE = 1, any hazard forces FREE = 0."""
        for (t, i, k), col in self.free.items():
            cols, vals = self._hazards(t, i, k)
            kappa = float(len(cols) + 1)
            self._row(cols + [col], vals + [1.0], 0.0, np.inf)
            self._row(cols + [col], vals + [kappa], -np.inf, kappa - 1.0)

    def _free_rows_and(self) -> None:
        """Exact AND: FREE <= each positive literal, FREE >= their sum minus (count - 1)."""
        for (t, i, k), col in self.free.items():
            cols, vals = self._hazards(t, i, k)
            self._row(cols + [col], vals + [1.0], 0.0, np.inf)
            self._row([col, self.R[t, k]], [1.0, -1.0], -np.inf, 0.0)
            for other in cols[1:]:
                self._row([col, other], [1.0, 1.0], -np.inf, 1.0)

    def _free_once_rows(self) -> None:
        """A value is freed at most once per stage."""
        by_value: dict[tuple[int, int], list[int]] = {}
        for (t, i, k), col in self.free.items():
            by_value.setdefault((t, i), []).append(col)
        for cols in by_value.values():
            if len(cols) > 1:
                self._row(cols, [1.0] * len(cols), -np.inf, 1.0)

    # ----- arrays for the backend ------------------------------------------------------------
    @property
    def num_cols(self) -> int:
        return len(self._cols_lower)

    def arrays(self) -> dict:
        """Column-wise sparse matrix and bounds, as HiGHS takes them."""
        from scipy.sparse import coo_matrix

        rows, cols, vals, lower, upper = [], [], [], [], []
        for r, (row_cols, row_vals, lo, hi) in enumerate(self._rows):
            rows.extend([r] * len(row_cols))
            cols.extend(row_cols)
            vals.extend(row_vals)
            lower.append(lo)
            upper.append(hi)
        matrix = coo_matrix((vals, (rows, cols)), shape=(len(self._rows), self.num_cols)).tocsc()
        matrix.sum_duplicates()
        return dict(matrix=matrix, row_lower=np.array(lower), row_upper=np.array(upper),
                    col_lower=np.array(self._cols_lower), col_upper=np.array(self._cols_upper),
                    cost=np.array(self._cols_obj), integrality=np.array(self._cols_int))

    # ----- schedules <-> vectors -----------------------------------------------------------
    def vector(self, R: np.ndarray, S: np.ndarray) -> np.ndarray:
        """Every column's value for the schedule (R, S): the exact FREE and U it implies."""
        x = np.zeros(self.num_cols)
        x[self.R[self.R >= 0]] = R[self.R >= 0]
        x[self.S[self.S >= 0]] = S[self.S >= 0]
        for (t, i, k), col in self.free.items():
            kept = t + 1 < self.size and S[t + 1, i]
            read_later = any(R[t, j] for j in self.later_users(i, k, t))
            x[col] = float(R[t, k] and not kept and not read_later)
        for t in range(self.size):
            used = float(np.dot(S[t, :t], self.mem[:t]))
            for k in range(t + 1):
                used += self.mem[k] * R[t, k]
                x[self.U[t, k]] = used
                used -= sum(self.mem[i] * x[self.free[t, i, k]] for i in self.graph.deps[k] + (k,))
        if self.peak_col is not None:
            x[self.peak_col] = self._candidates(x).max()
        return x

    def _candidates(self, x: np.ndarray) -> np.ndarray:
        """Every ``U[t,k] + w_k R[t,k]`` of a solution vector, in model units."""
        cols = self.U >= 0
        nodes = np.broadcast_to(np.arange(self.size), (self.size, self.size))[cols]
        return x[self.U[cols]] + self.workspace[nodes] * x[self.R[cols]]

    def schedule(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """R and S of a solution vector (0/1 by rounding at 1/2)."""
        R = np.zeros((self.size, self.size), dtype=bool)
        S = np.zeros((self.size, self.size), dtype=bool)
        R[self.R >= 0] = x[self.R[self.R >= 0]] > 0.5
        S[self.S >= 0] = x[self.S[self.S >= 0]] > 0.5
        return R, S

    def peak_of(self, x: np.ndarray) -> float:
        """The MILP's peak memory in bytes (static included) for a solution vector."""
        return self.graph.static_mem + float(self._candidates(x).max()) * self.mem_unit

    def violation(self, x: np.ndarray) -> float:
        """Largest row or bound violation of ``x`` (0 when it satisfies the model)."""
        a = self.arrays()
        activity = a["matrix"] @ x
        worst = np.concatenate([a["row_lower"] - activity, activity - a["row_upper"],
                                a["col_lower"] - x, x - a["col_upper"], [0.0]])
        return float(np.max(worst))


def _memory_unit(mem: np.ndarray) -> float:
    """Bytes per model unit: sizes stay below ~1000 units so HiGHS's tolerances stay tiny
    relative to one value, and unit-size graphs keep unit coefficients."""
    largest = float(mem.max()) if mem.size else 0.0
    return 1.0 if largest <= 1000 else largest / 1000.0


def _useless(graph: RematGraph) -> np.ndarray:
    """[t, i] where neither computing nor keeping value i in stage t can serve any schedule.

    Stage t >= 1 and every later stage only ever compute nodes <= their own index; a value i
    is worth having in stage t only if some node that can still run from stage t on reads it,
    i.e. if i has a user at all or is needed by node t itself. Value i with no users is read by
    nobody: keeping it (S) is never useful, and computing it in a stage other than its own
    (R[t,i], t != i) is never useful either.
    """
    size = graph.size
    out = np.zeros((size, size), dtype=bool)
    for i in range(size):
        if not graph.users[i]:
            out[i + 1:, i] = True
    return out
