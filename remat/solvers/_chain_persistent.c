/* The persistent recursion of chain-dp (remat/solvers/chain_dp.py, ``_ChainDP`` with
 * ``extended=False``) in C: the same states, interval stores, branch and bound and float
 * operations in the same order, so its costs, peaks and schedules are those of the Python
 * recursion bit for bit (tests/test_fast_solvers.py compares them). chain_dp.py prepares the
 * tables and falls back to the Python recursion where this module was not built.
 *
 * solve(n, fp, bp, mem, fws, grad, base, need, store_peak, segment, segments, budget, seconds)
 *   n: layers including the loss layer; fp, bp: prefix sums of forward and backward costs
 *   (n + 1 each); mem, fws, base: n each; grad: n + 1; need: n * n; store_peak: 2 * n * n
 *   ([top][s][t]); segment: n * n ints, the state store of seg(s, t) (0..segments-1, equal for
 *   segments of equal content); budget: the root's budget; seconds: time limit (< 0: none).
 * Returns None past the time limit, else (cost, peak, solves, sweeps): sweeps is a flat list
 * (t, first, last, ...) of the forward sweeps of the schedule (empty when nothing fits).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLACK 1e-12
#define NO_CHOICE (-1)

typedef struct {
    double *low, *high, *cost;
    int *choice;
    Py_ssize_t len, cap;
    double *above_at, *above; /* facts from cut searches: a staircase, above_at rising */
    Py_ssize_t alen, acap;
} Steps;

typedef struct {
    Py_ssize_t n;
    const double *fp, *bp, *fcost, *mem, *fws, *grad, *base, *need, *store_peak;
    const int *segment;
    Steps *steps; /* [segment * 2 + top] */
    Py_ssize_t nsteps;
    long long solves;
    double deadline; /* CLOCK_MONOTONIC seconds; < 0: none */
    jmp_buf fail;
    int failure; /* 1: out of time, 2: out of memory, 3: lost interval */
    int *ops;
    Py_ssize_t nops, opscap;
} DP;

typedef struct {
    double best, peak, least;
    int choice;
} Search;

typedef struct {
    double cost, peak;
} Answer;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *grow(DP *dp, void *ptr, Py_ssize_t count, size_t size) {
    void *out = realloc(ptr, (size_t)count * size);
    if (!out) {
        dp->failure = 2;
        longjmp(dp->fail, 1);
    }
    return out;
}

/* first index whose value is > x (Python's bisect_right) */
static Py_ssize_t bisect_right(const double *a, Py_ssize_t len, double x) {
    Py_ssize_t lo = 0, hi = len;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < a[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* first index whose value is >= x (Python's bisect_left) */
static Py_ssize_t bisect_left(const double *a, Py_ssize_t len, double x) {
    Py_ssize_t lo = 0, hi = len;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* ----- _Steps ------------------------------------------------------------------------- */

static double pymax(double a, double b) { return b > a ? b : a; } /* Python's max(a, b) */

static double steps_bound(const Steps *st, double budget, Py_ssize_t i) {
    Py_ssize_t k = bisect_left(st->above_at, st->alen, budget);
    double fact = k < st->alen ? st->above[k] : -INFINITY;
    return i + 1 < st->len ? pymax(fact, st->cost[i + 1]) : fact;
}

static void steps_add_bound(DP *dp, Steps *st, double budget, double value) {
    Py_ssize_t k = bisect_left(st->above_at, st->alen, budget), start = k, end, removed;
    if (k < st->alen && st->above[k] >= value) return;
    end = (k < st->alen && st->above_at[k] == budget) ? k + 1 : k;
    while (start > 0 && st->above[start - 1] <= value) start--;
    removed = end - start; /* [start, end) becomes one entry */
    if (removed == 0) {
        if (st->alen == st->acap) {
            st->acap = st->acap ? 2 * st->acap : 4;
            st->above_at = grow(dp, st->above_at, st->acap, sizeof(double));
            st->above = grow(dp, st->above, st->acap, sizeof(double));
        }
        memmove(st->above_at + start + 1, st->above_at + start,
                (size_t)(st->alen - start) * sizeof(double));
        memmove(st->above + start + 1, st->above + start,
                (size_t)(st->alen - start) * sizeof(double));
        st->alen++;
    } else if (removed > 1) {
        memmove(st->above_at + start + 1, st->above_at + end,
                (size_t)(st->alen - end) * sizeof(double));
        memmove(st->above + start + 1, st->above + end, (size_t)(st->alen - end) * sizeof(double));
        st->alen -= removed - 1;
    }
    st->above_at[start] = budget;
    st->above[start] = value;
}

static Answer steps_answer(const Steps *st, Py_ssize_t i) {
    Answer a = {st->cost[i], st->cost[i] < INFINITY ? st->low[i] : INFINITY};
    return a;
}

static Py_ssize_t steps_find(const Steps *st, double budget) {
    Py_ssize_t i = bisect_right(st->low, st->len, budget) - 1;
    return (i >= 0 && budget <= st->high[i]) ? i : -1;
}

static Py_ssize_t steps_add(DP *dp, Steps *st, double budget, double cost, double peak,
                            int choice) {
    double low = cost < INFINITY ? peak : -INFINITY;
    Py_ssize_t i = bisect_left(st->low, st->len, low), j = i, removed;
    while (j < st->len && st->low[j] <= budget) j++;
    removed = j - i;
    if (removed == 0) {
        if (st->len == st->cap) {
            st->cap = st->cap ? 2 * st->cap : 4;
            st->low = grow(dp, st->low, st->cap, sizeof(double));
            st->high = grow(dp, st->high, st->cap, sizeof(double));
            st->cost = grow(dp, st->cost, st->cap, sizeof(double));
            st->choice = grow(dp, st->choice, st->cap, sizeof(int));
        }
        memmove(st->low + i + 1, st->low + i, (size_t)(st->len - i) * sizeof(double));
        memmove(st->high + i + 1, st->high + i, (size_t)(st->len - i) * sizeof(double));
        memmove(st->cost + i + 1, st->cost + i, (size_t)(st->len - i) * sizeof(double));
        memmove(st->choice + i + 1, st->choice + i, (size_t)(st->len - i) * sizeof(int));
        st->len++;
    } else if (removed > 1) {
        memmove(st->low + i + 1, st->low + j, (size_t)(st->len - j) * sizeof(double));
        memmove(st->high + i + 1, st->high + j, (size_t)(st->len - j) * sizeof(double));
        memmove(st->cost + i + 1, st->cost + j, (size_t)(st->len - j) * sizeof(double));
        memmove(st->choice + i + 1, st->choice + j, (size_t)(st->len - j) * sizeof(int));
        st->len -= removed - 1;
    }
    st->low[i] = low;
    st->high[i] = budget;
    st->cost[i] = cost;
    st->choice[i] = choice;
    return i;
}

/* ----- _Search ------------------------------------------------------------------------ */

static void search_init(Search *run, double cutoff, double in_cost, double in_peak,
                        int in_choice) {
    run->best = cutoff + SLACK * fabs(cutoff);
    run->peak = INFINITY;
    run->choice = NO_CHOICE;
    if (in_cost <= run->best) {
        run->best = in_cost;
        run->peak = in_peak;
        run->choice = in_choice;
    }
    run->least = INFINITY;
}

static int search_stop(Search *run, double bound) {
    if (bound > run->best) {
        if (bound < run->least) run->least = bound;
        return 1;
    }
    return 0;
}

static int search_missed(Search *run, double total, double peak) {
    if (peak == INFINITY || total > run->best) {
        if (total < run->least) run->least = total;
        return 1;
    }
    return 0;
}

static void search_offer(Search *run, double total, double peak, int choice) {
    if (total < run->best || peak < run->peak) {
        run->best = total;
        run->peak = peak;
        run->choice = choice;
    }
}

/* ----- the recursion ------------------------------------------------------------------ */

static Answer best(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget, double cutoff);

static double store_cost(const DP *dp, Py_ssize_t s, Py_ssize_t t, int top) {
    return dp->fp[t + 1 - top] - dp->fp[s] + dp->bp[t + 1] - dp->bp[s];
}

/* _split with extended=False: the persistent pass; returns the search's result */
static Answer split(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget, double cutoff,
                    double in_cost, double in_peak, int in_choice, int *choice) {
    const double *fp = dp->fp, *bp = dp->bp, *mem = dp->mem, *fws = dp->fws;
    double floor_ = fp[t + 1 - top] - fp[s] + bp[t + 1] - bp[s];
    double base = dp->base[s];
    double extra = base + dp->grad[t + 1] + (top ? mem[t] : 0.0);
    double run_cost = 0.0, run_peak = extra + mem[s] + fws[s];
    Search run;
    Answer out;
    search_init(&run, cutoff, in_cost, in_peak, in_choice);
    for (Py_ssize_t j = s; j < t; j++) {
        Py_ssize_t k = j - s;
        double rest_least, upper;
        Answer up;
        if (j > s) {
            double pair = mem[j - 1] + mem[j] + fws[j];
            run_peak = pymax(run_peak, extra + pair);
        }
        run_cost += dp->fcost[j];
        if (run_peak > budget || search_stop(&run, floor_ + fp[j] - fp[s])) break;
        rest_least = fp[j] - fp[s] + bp[j + 1] - bp[s];
        up = best(dp, j + 1, t, top, budget - base, run.best - run_cost - rest_least);
        upper = up.cost + run_cost;
        if (search_missed(&run, upper + rest_least, up.peak)) continue;
        for (int keep = 1; keep >= 0; keep--) {
            Answer low = best(dp, s, j, keep, budget, run.best - upper);
            if (!search_missed(&run, upper + low.cost, low.peak)) {
                double peak = pymax(pymax(run_peak, base + up.peak), low.peak);
                search_offer(&run, upper + low.cost, peak, (int)(k + 1) * 2 + keep);
            }
        }
    }
    if (run.choice != NO_CHOICE) {
        out.cost = run.best;
        out.peak = run.peak;
    } else {
        out.cost = run.least;
        out.peak = INFINITY;
    }
    *choice = run.choice;
    return out;
}

/* _lookup: the interval store's answer at ``budget``, solving on a miss */
static Answer lookup(DP *dp, Steps *st, Py_ssize_t s, Py_ssize_t t, int top, double budget,
                     double cutoff) {
    Py_ssize_t i = bisect_right(st->low, st->len, budget) - 1;
    if (i < 0 || budget > st->high[i]) {
        double known = steps_bound(st, budget, i);
        double in_cost = INFINITY, in_peak = INFINITY;
        int in_choice = NO_CHOICE, choice;
        Answer found;
        if (known > cutoff || known == INFINITY) {
            Answer a = {known, INFINITY};
            return a;
        }
        if (i >= 0) {
            in_cost = st->cost[i];
            in_peak = st->low[i];
            in_choice = st->choice[i];
            if (in_cost <= known) { /* the schedule of the interval below fits and wins */
                st->high[i] = budget;
                return steps_answer(st, i);
            }
        }
        dp->solves++;
        if (dp->deadline >= 0 && !(dp->solves & 1023) && now() > dp->deadline) {
            dp->failure = 1;
            longjmp(dp->fail, 1);
        }
        found = split(dp, s, t, top, budget, cutoff, in_cost, in_peak, in_choice, &choice);
        /* split touched other stores only; this one's arrays are as they were */
        if (choice == NO_CHOICE && cutoff < INFINITY) {
            Answer a = {found.cost, INFINITY};
            steps_add_bound(dp, st, budget, found.cost);
            return a;
        }
        i = steps_add(dp, st, budget, found.cost, found.peak, choice);
    }
    return steps_answer(st, i);
}

static Steps *store_of(DP *dp, Py_ssize_t s, Py_ssize_t t, int top) {
    return &dp->steps[(Py_ssize_t)dp->segment[s * dp->n + t] * 2 + top];
}

static Answer best(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget, double cutoff) {
    Py_ssize_t n = dp->n;
    double store = dp->store_peak[(top * n + s) * n + t];
    if (budget < dp->need[s * n + t]) {
        Answer a = {INFINITY, INFINITY};
        return a;
    }
    if (budget >= store) {
        Answer a = {store_cost(dp, s, t, top), store};
        return a;
    }
    return lookup(dp, store_of(dp, s, t, top), s, t, top, budget, cutoff);
}

static void emit(DP *dp, Py_ssize_t t, Py_ssize_t first, Py_ssize_t last) {
    if (dp->nops + 3 > dp->opscap) {
        dp->opscap = dp->opscap ? 2 * dp->opscap : 96;
        dp->ops = grow(dp, dp->ops, dp->opscap, sizeof(int));
    }
    dp->ops[dp->nops++] = (int)t;
    dp->ops[dp->nops++] = (int)first;
    dp->ops[dp->nops++] = (int)last;
}

/* recomputed: the forward sweeps of best(s, t, top, budget), the part above first */
static void recomputed(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget) {
    Py_ssize_t n = dp->n, i, dm;
    Steps *st;
    int choice;
    if (budget >= dp->store_peak[(top * n + s) * n + t]) {
        emit(dp, t, s, t - top);
        return;
    }
    best(dp, s, t, top, budget, INFINITY);
    st = store_of(dp, s, t, top);
    i = steps_find(st, budget);
    if (i < 0 || st->choice[i] == NO_CHOICE) {
        dp->failure = 3;
        longjmp(dp->fail, 1);
    }
    choice = st->choice[i];
    dm = choice / 2;
    emit(dp, t, s, s + dm - 1);
    recomputed(dp, s + dm, t, top, budget - dp->base[s]);
    recomputed(dp, s, s + dm - 1, choice % 2, budget);
}

/* ----- the module --------------------------------------------------------------------- */

/* a buffer of ``count`` doubles (or C ints for ``segment``) */
static int table(Py_buffer *view, Py_ssize_t count, const char *name) {
    Py_ssize_t size = strcmp(name, "segment") ? (Py_ssize_t)sizeof(double) : (Py_ssize_t)sizeof(int);
    if (view->len != count * size) {
        PyErr_Format(PyExc_ValueError, "_chain_persistent: %s holds %zd bytes, expected %zd "
                     "items of %zd bytes", name, view->len, count, size);
        return 0;
    }
    return 1;
}

static void release(DP *dp) {
    if (dp->steps) {
        for (Py_ssize_t k = 0; k < dp->nsteps; k++) {
            Steps *st = &dp->steps[k];
            free(st->low); free(st->high); free(st->cost); free(st->choice);
            free(st->above_at); free(st->above);
        }
        free(dp->steps);
    }
    free(dp->ops);
}

static PyObject *run(DP *dp, double budget) {
    volatile Answer root = {INFINITY, INFINITY};
    PyObject *sweeps;
    if (setjmp(dp->fail)) {
        if (dp->failure == 1) Py_RETURN_NONE;
        if (dp->failure == 2) return PyErr_NoMemory();
        PyErr_SetString(PyExc_RuntimeError, "_chain_persistent: a solved budget lost its "
                        "interval while rebuilding the schedule; please report this chain");
        return NULL;
    }
    root = best(dp, 0, dp->n - 1, 0, budget, INFINITY);
    if (root.cost < INFINITY) recomputed(dp, 0, dp->n - 1, 0, budget);
    sweeps = PyList_New(dp->nops);
    if (!sweeps) return NULL;
    for (Py_ssize_t k = 0; k < dp->nops; k++) {
        PyObject *v = PyLong_FromLong(dp->ops[k]);
        if (!v) {
            Py_DECREF(sweeps);
            return NULL;
        }
        PyList_SET_ITEM(sweeps, k, v);
    }
    return Py_BuildValue("ddLN", root.cost, root.peak, dp->solves, sweeps);
}

static PyObject *solve(PyObject *self, PyObject *args) {
    Py_ssize_t n, segments;
    Py_buffer fp, bp, fcost, mem, fws, grad, base, need, store, segment;
    double budget, seconds;
    DP dp;
    PyObject *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*y*y*y*y*y*y*ndd", &n, &fp, &bp, &fcost, &mem, &fws,
                          &grad, &base, &need, &store, &segment, &segments, &budget, &seconds))
        return NULL;
    memset(&dp, 0, sizeof dp);
    if (n >= 1 && segments >= 1 && table(&fp, n + 1, "fp") && table(&bp, n + 1, "bp") &&
        table(&fcost, n, "fcost") && table(&mem, n, "mem") && table(&fws, n, "fws") &&
        table(&grad, n + 1, "grad") && table(&base, n, "base") && table(&need, n * n, "need") &&
        table(&store, 2 * n * n, "store_peak") && table(&segment, n * n, "segment")) {
        dp.n = n;
        dp.fp = fp.buf; dp.bp = bp.buf; dp.fcost = fcost.buf; dp.mem = mem.buf;
        dp.fws = fws.buf; dp.grad = grad.buf; dp.base = base.buf; dp.need = need.buf;
        dp.store_peak = store.buf; dp.segment = segment.buf;
        dp.nsteps = 2 * segments;
        dp.steps = calloc((size_t)dp.nsteps, sizeof(Steps));
        dp.deadline = seconds < 0 ? -1.0 : now() + seconds;
        if (!dp.steps) {
            PyErr_NoMemory();
        } else {
            out = run(&dp, budget);
        }
        release(&dp);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "_chain_persistent: n and segments must be >= 1");
    }
    PyBuffer_Release(&fp); PyBuffer_Release(&bp); PyBuffer_Release(&fcost);
    PyBuffer_Release(&mem); PyBuffer_Release(&fws); PyBuffer_Release(&grad);
    PyBuffer_Release(&base); PyBuffer_Release(&need); PyBuffer_Release(&store);
    PyBuffer_Release(&segment);
    return out;
}

static PyMethodDef methods[] = {
    {"solve", solve, METH_VARARGS,
     "solve(n, fp, bp, fcost, mem, fws, grad, base, need, store_peak, segment, segments, "
     "budget, seconds) -> None past the time limit, else (cost, peak, solves, sweeps)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chain_persistent",
    "chain-dp's persistent recursion in C (see remat/solvers/chain_dp.py)", -1, methods,
};

PyMODINIT_FUNC PyInit__chain_persistent(void) { return PyModule_Create(&module); }
