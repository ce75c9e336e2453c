/* chain-dp's recursions (remat/solvers/chain_dp.py, ``_ChainDP``) in C: the persistent one
 * (``extended`` 0) and the full class (held and drop blocks, ``extended`` 1), with the same
 * states, interval stores, branch and bound and float operations in the same order, so their
 * costs, peaks, schedules and solve counts are those of the Python recursion bit for bit
 * (tests/test_fast_solvers.py compares them). chain_dp.py prepares the tables and falls back
 * to the Python recursion where this module was not built.
 *
 * new_state(n, fp, bp, fcost, mem, fws, grad, base, need, own, store_peak, segment, segments,
 *           extended, stored=None)
 *   n: layers including the loss layer; fp, bp: prefix sums of forward and backward costs
 *   (n + 1 each); fcost, mem, fws, base: n each; grad: n + 1; need, own: n * n; store_peak:
 *   2 * n * n ([top][s][t]); segment: n * n C ints, the content of segment s..t (0..segments-1,
 *   equal for segments of equal content); stored: None, or n bytes, nonzero where a_j may be
 *   stored as a checkpoint (the persistent recursion only, ``extended`` 0: a subset of its
 *   class, whose answers are schedules that fit but not its optimum; segment ids must then
 *   tell apart segments of different masks). Returns a capsule: the recursion's interval stores,
 *   empty, which every solve() on it adds to (their facts hold at every budget), and the
 *   tables, held until the capsule is freed.
 * solve(state, budget, cutoff, seconds, threaded=False)
 *   budget, cutoff: the root's (``best``); seconds: the time limit (< 0: none); threaded: run
 *   the recursion without the GIL (another thread may then call stop(); Ctrl-C is not
 *   checked). The caller keeps two solves of one state from running at once.
 * Returns None past the time limit (the stores keep every search that finished: a later
 * solve resumes), else (cost, peak, solves, sweeps): solves counts this call's searches;
 * sweeps is a flat list (t, first, last, ...) of the forward sweeps of the schedule, empty
 * when the root has none (peak inf: nothing fits, or nothing within the cutoff).
 * stop(state, flag)
 *   flag true: a solve in progress, or the next, ends as past its time limit (returns None,
 *   keeping its finished searches) until stop(state, False).
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

/* the interval stores of held and drop states, by content: an open-addressing table of
 * keys (0: empty) and stores allocated in blocks that never move */
#define BLOCK 1024
typedef struct {
    unsigned long long *keys;
    Steps **stores;
    Py_ssize_t cap, used;
    Steps **blocks;
    Py_ssize_t nblocks, blockcap, inblock;
} Table;

typedef struct {
    Py_ssize_t n;
    int extended;
    const double *fp, *bp, *fcost, *mem, *fws, *grad, *base, *need, *own, *store_peak;
    const int *segment;
    const char *stored; /* NULL, or where a checkpoint may be stored */
    Steps *steps; /* seg states: [segment * 2 + top] */
    Py_ssize_t nsteps;
    Table blocks; /* held and drop states */
    long long solves;
    double deadline; /* CLOCK_MONOTONIC seconds; < 0: none */
    jmp_buf fail;
    int failure; /* 1: out of time, 2: out of memory, 3: lost interval, 4: a signal */
    volatile int stop; /* set by stop(): ends the search as out of time */
    int threaded; /* the GIL released: no Python calls */
    int *ops;
    Py_ssize_t nops, opscap;
    double **scratch; /* the sweeps in use, innermost last: freed here if a search stops */
    Py_ssize_t nscratch, scratchcap;
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

static int search_settled(Search *run, double least) {
    if (run->best <= least) {
        if (least < run->least) run->least = least;
        return 1;
    }
    return 0;
}

static Answer search_result(const Search *run, int *choice) {
    Answer out = {run->least, INFINITY};
    if (run->choice != NO_CHOICE) {
        out.cost = run->best;
        out.peak = run->peak;
    }
    *choice = run->choice;
    return out;
}

/* ----- the held and drop stores ------------------------------------------------------- */

enum { SEG, HELD, DROP };

static Steps *new_store(DP *dp) {
    Table *tb = &dp->blocks;
    if (tb->nblocks == 0 || tb->inblock == BLOCK) {
        if (tb->nblocks == tb->blockcap) {
            tb->blockcap = tb->blockcap ? 2 * tb->blockcap : 16;
            tb->blocks = grow(dp, tb->blocks, tb->blockcap, sizeof(Steps *));
        }
        tb->blocks[tb->nblocks] = calloc(BLOCK, sizeof(Steps));
        if (!tb->blocks[tb->nblocks]) {
            dp->failure = 2;
            longjmp(dp->fail, 1);
        }
        tb->nblocks++;
        tb->inblock = 0;
    }
    return &tb->blocks[tb->nblocks - 1][tb->inblock++];
}

static Py_ssize_t slot(const Table *tb, unsigned long long key) {
    Py_ssize_t i = (Py_ssize_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (tb->cap - 1);
    while (tb->keys[i] && tb->keys[i] != key) i = (i + 1) & (tb->cap - 1);
    return i;
}

static void rehash(DP *dp) {
    Table *tb = &dp->blocks, old = *tb;
    tb->cap = old.cap ? 2 * old.cap : 1024;
    tb->keys = calloc((size_t)tb->cap, sizeof(unsigned long long));
    tb->stores = calloc((size_t)tb->cap, sizeof(Steps *));
    if (!tb->keys || !tb->stores) {
        free(tb->keys); free(tb->stores);
        *tb = old;
        dp->failure = 2;
        longjmp(dp->fail, 1);
    }
    for (Py_ssize_t k = 0; k < old.cap; k++) {
        if (old.keys[k]) {
            Py_ssize_t i = slot(tb, old.keys[k]);
            tb->keys[i] = old.keys[k];
            tb->stores[i] = old.stores[k];
        }
    }
    free(old.keys);
    free(old.stores);
}

/* _state: the store of held(s, t, top, m, e) or drop(s, t, top, m, e), by content */
static Steps *block_store(DP *dp, int kind, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m,
                          int e) {
    Table *tb = &dp->blocks;
    unsigned long long key = (unsigned long long)dp->segment[s * dp->n + t];
    Py_ssize_t i;
    key = (((key * 2 + (unsigned long long)(kind == DROP)) * 2 + (unsigned long long)top)
           * (unsigned long long)(dp->n + 1) + (unsigned long long)(m - s)) * 2 + (unsigned)e + 1;
    if (2 * (tb->used + 1) > tb->cap) rehash(dp);
    i = slot(tb, key);
    if (!tb->keys[i]) {
        tb->stores[i] = new_store(dp);
        tb->keys[i] = key;
        tb->used++;
    }
    return tb->stores[i];
}

/* ----- the recursion ------------------------------------------------------------------ */

static Answer best(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget, double cutoff);
static Answer held(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m, int e,
                   double budget, double cutoff);
static Answer drop(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, int e,
                   double budget, double cutoff);

static double store_cost(const DP *dp, Py_ssize_t s, Py_ssize_t t, int top) {
    return dp->fp[t + 1 - top] - dp->fp[s] + dp->bp[t + 1] - dp->bp[s];
}

/* _sweep: the forward sweep of stage b_t from base a_{s-1} through a_s..a_{s+len-1} (cost
 * through a_j, peak with the base held, peak with the base freed after computing a_s); the
 * caller frees the three arrays (one block) with done_sweep */
static double *sweep(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t len,
                     double **held_peak, double **freed_peak) {
    const double *mem = dp->mem, *fws = dp->fws, *fc = dp->fcost;
    double base = dp->base[s];
    double extra = base + dp->grad[t + 1] + (top ? mem[t] : 0.0);
    double cost = 0.0, peak = extra + mem[s] + fws[s], early = peak;
    double *costs;
    if (dp->nscratch == dp->scratchcap) {
        dp->scratchcap = dp->scratchcap ? 2 * dp->scratchcap : 16;
        dp->scratch = grow(dp, dp->scratch, dp->scratchcap, sizeof(double *));
    }
    costs = malloc((size_t)(3 * (len > 0 ? len : 1)) * sizeof(double));
    if (!costs) {
        dp->failure = 2;
        longjmp(dp->fail, 1);
    }
    dp->scratch[dp->nscratch++] = costs;
    *held_peak = costs + len;
    *freed_peak = costs + 2 * len;
    for (Py_ssize_t k = 0; k < len; k++) {
        Py_ssize_t j = s + k;
        if (j > s) {
            double pair = mem[j - 1] + mem[j] + fws[j];
            peak = pymax(peak, extra + pair);
            early = pymax(early, extra - base + pair);
        }
        cost += fc[j];
        costs[k] = cost;
        (*held_peak)[k] = peak;
        (*freed_peak)[k] = early;
    }
    return costs;
}

/* frees the innermost sweep */
static void done_sweep(DP *dp) {
    free(dp->scratch[--dp->nscratch]);
}

/* _lifted: a lower bound on every held or drop block over layers u..t ending at b_m */
static double lifted(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, double budget,
                     double cutoff) {
    double fwd = dp->fp[m] - dp->fp[u];
    return fwd + best(dp, m, t, top, budget + dp->mem[m - 1], cutoff - fwd).cost;
}

/* _above: the part above a stored a_j */
static Answer above(DP *dp, Py_ssize_t j, Py_ssize_t t, int top, Py_ssize_t m, int e,
                    double budget, double cutoff) {
    if (m == j + 1) return best(dp, j + 1, t, top, budget, cutoff);
    return drop(dp, j + 1, t, top, m, e, budget, cutoff);
}

/* _persistent_pass: choices (dm, keep, not a block) */
static void persistent_pass(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget,
                            double floor_, Search *run) {
    const double *fp = dp->fp, *bp = dp->bp, *mem = dp->mem, *fws = dp->fws;
    double base = dp->base[s];
    double extra = base + dp->grad[t + 1] + (top ? mem[t] : 0.0);
    double run_cost = 0.0, run_peak = extra + mem[s] + fws[s];
    for (Py_ssize_t j = s; j < t; j++) {
        Py_ssize_t k = j - s;
        double rest_least, upper;
        Answer up;
        if (j > s) {
            double pair = mem[j - 1] + mem[j] + fws[j];
            run_peak = pymax(run_peak, extra + pair);
        }
        run_cost += dp->fcost[j];
        if (run_peak > budget || search_stop(run, floor_ + fp[j] - fp[s])) break;
        if (dp->stored && !dp->stored[j]) continue;
        rest_least = fp[j] - fp[s] + bp[j + 1] - bp[s];
        up = best(dp, j + 1, t, top, budget - base, run->best - run_cost - rest_least);
        upper = up.cost + run_cost;
        if (search_missed(run, upper + rest_least, up.peak)) continue;
        for (int keep = 1; keep >= 0; keep--) {
            Answer low = best(dp, s, j, keep, budget, run->best - upper);
            if (!search_missed(run, upper + low.cost, low.peak)) {
                double peak = pymax(pymax(run_peak, base + up.peak), low.peak);
                search_offer(run, upper + low.cost, peak, (int)(k + 1) * 4 + keep * 2);
            }
        }
    }
}

/* _split: seg(s, t, top); choice dm * 4 + e * 2 + block */
static Answer split(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget, double cutoff,
                    double in_cost, double in_peak, int in_choice, int *choice) {
    const double *fp = dp->fp, *bp = dp->bp;
    double floor_ = fp[t + 1 - top] - fp[s] + bp[t + 1] - bp[s];
    double block_least = fp[t + 1 - top] - fp[s] + bp[t + 1];
    Search run;
    search_init(&run, cutoff, in_cost, in_peak, in_choice);
    persistent_pass(dp, s, t, top, budget, floor_, &run);
    if (!dp->extended) return search_result(&run, choice);
    for (Py_ssize_t mp = s + 1; mp <= t; mp++) {
        if (search_stop(&run, floor_ + fp[mp - 1] - fp[s])) break;
        for (int e = 1; e >= 0; e--) {
            Answer rest, block;
            if (search_stop(&run, floor_ + fp[mp - e] - fp[s])) continue;
            rest = best(dp, s, mp - 1, e, budget, run.best - block_least + bp[mp]);
            if (search_missed(&run, block_least - bp[mp] + rest.cost, rest.peak)) continue;
            if (search_stop(&run, lifted(dp, s, t, top, mp, budget - dp->base[s],
                                         run.best - rest.cost) + rest.cost))
                continue;
            block = held(dp, s, t, top, mp, e, budget, run.best - rest.cost);
            if (!search_missed(&run, block.cost + rest.cost, block.peak))
                search_offer(&run, block.cost + rest.cost, pymax(block.peak, rest.peak),
                             (int)(mp - s) * 4 + e * 2 + 1);
        }
    }
    return search_result(&run, choice);
}

/* The choices of a held or drop block over layers s..t ending at b_m whose sweep stores a_j
 * first, j = s + k from m - 1 down: the part above a_j within ``up_budget``, its peak raised by
 * ``lift`` (the base of a held block), choice k * ``scale``. Returns 1 once ``least`` bounds
 * every choice left and the best meets it. */
static int first_checkpoints(DP *dp, Search *run, Py_ssize_t s, Py_ssize_t t, int top,
                             Py_ssize_t m, int e, double budget, double up_budget,
                             const double *costs, const double *peaks, double lift, int scale,
                             double least) {
    for (Py_ssize_t k = m - s - 1; k >= 0; k--) {
        Answer up;
        if (peaks[k] > budget) continue;
        up = above(dp, s + k, t, top, m, e, up_budget, run->best - costs[k]);
        if (!search_missed(run, costs[k] + up.cost, up.peak))
            search_offer(run, costs[k] + up.cost, pymax(peaks[k], lift + up.peak),
                         (int)k * scale);
        if (search_settled(run, least)) return 1;
    }
    return 0;
}

/* _split_held: held(s, t, top, m, e); choice j - s */
static Answer split_held(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m, int e,
                         double budget, double cutoff, double in_cost, double in_peak,
                         int in_choice, int *choice) {
    double base = dp->base[s], up_budget = budget - base, least;
    double *costs, *held_peak, *freed_peak;
    Search run;
    search_init(&run, cutoff, in_cost, in_peak, in_choice);
    least = lifted(dp, s, t, top, m, up_budget, run.best);
    if (search_stop(&run, least)) return search_result(&run, choice);
    costs = sweep(dp, s, t, top, m - s, &held_peak, &freed_peak);
    first_checkpoints(dp, &run, s, t, top, m, e, budget, up_budget, costs, held_peak, base, 1,
                      least);
    done_sweep(dp);
    return search_result(&run, choice);
}

/* _split_drop: drop(u, t, top, m, e); choice k * 4 (a_{u+k} stored first, the base freed) or
 * dm * 4 + e2 * 2 + 1 (a first block held(u, t, top, u + dm, e2)) */
static Answer split_drop(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, int e,
                         double budget, double cutoff, double in_cost, double in_peak,
                         int in_choice, int *choice) {
    const double *fp = dp->fp, *bp = dp->bp;
    double floor_ = fp[t + 1 - top] - fp[u] + bp[t + 1] - bp[m];
    double block_least, base, least;
    double *costs, *held_peak, *freed_peak;
    Search run;
    search_init(&run, cutoff, in_cost, in_peak, in_choice);
    least = pymax(floor_, lifted(dp, u, t, top, m, budget, run.best));
    if (search_stop(&run, least)) return search_result(&run, choice);
    costs = sweep(dp, u, t, top, m - u, &held_peak, &freed_peak);
    if (first_checkpoints(dp, &run, u, t, top, m, e, budget, budget, costs, freed_peak, 0.0, 4,
                          least)) {
        done_sweep(dp);
        return search_result(&run, choice);
    }
    done_sweep(dp);
    block_least = fp[t + 1 - top] - fp[u] + bp[t + 1];
    base = dp->base[u];
    for (Py_ssize_t mp = m + 1; mp <= t; mp++) {
        double block_lift;
        if (search_stop(&run, floor_ + fp[mp - 1] - fp[u])) break;
        block_lift = lifted(dp, u, t, top, mp, budget - base,
                            run.best - (fp[mp - 1] - fp[u] + bp[mp] - bp[m]));
        for (int e2 = 1; e2 >= 0; e2--) {
            double rest_least;
            Answer rest, block;
            if (search_stop(&run, floor_ + fp[mp - e2] - fp[u])) continue;
            rest_least = lifted(dp, u, mp - 1, e2, m, budget, run.best - block_lift);
            if (search_stop(&run, block_lift + rest_least)) continue;
            rest = drop(dp, u, mp - 1, e2, m, e, budget, run.best - block_least + bp[mp]);
            if (search_missed(&run, block_least - bp[mp] + rest.cost, rest.peak)) continue;
            block = held(dp, u, t, top, mp, e2, budget, run.best - rest.cost);
            if (!search_missed(&run, block.cost + rest.cost, block.peak))
                search_offer(&run, block.cost + rest.cost, pymax(block.peak, rest.peak),
                             (int)(mp - u) * 4 + e2 * 2 + 1);
        }
    }
    return search_result(&run, choice);
}

/* _lookup: the interval store's answer at ``budget``, solving on a miss */
static Answer lookup(DP *dp, Steps *st, int kind, Py_ssize_t s, Py_ssize_t t, int top,
                     Py_ssize_t m, int e, double budget, double cutoff) {
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
        if (!(dp->solves & 1023)) {
            if (dp->stop || (dp->deadline >= 0 && now() > dp->deadline)) {
                dp->failure = 1;
                longjmp(dp->fail, 1);
            }
            if (!dp->threaded && PyErr_CheckSignals() < 0) { /* Ctrl-C: its handler raised */
                dp->failure = 4;
                longjmp(dp->fail, 1);
            }
        }
        if (kind == SEG)
            found = split(dp, s, t, top, budget, cutoff, in_cost, in_peak, in_choice, &choice);
        else if (kind == HELD)
            found = split_held(dp, s, t, top, m, e, budget, cutoff, in_cost, in_peak,
                               in_choice, &choice);
        else
            found = split_drop(dp, s, t, top, m, e, budget, cutoff, in_cost, in_peak,
                               in_choice, &choice);
        if (choice == NO_CHOICE && cutoff < INFINITY) {
            Answer a = {found.cost, INFINITY};
            steps_add_bound(dp, st, budget, found.cost);
            return a;
        }
        i = steps_add(dp, st, budget, found.cost, found.peak, choice);
    }
    return steps_answer(st, i);
}

static Steps *seg_store(DP *dp, Py_ssize_t s, Py_ssize_t t, int top) {
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
    return lookup(dp, seg_store(dp, s, t, top), SEG, s, t, top, 0, 0, budget, cutoff);
}

static Answer held(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m, int e,
                   double budget, double cutoff) {
    return lookup(dp, block_store(dp, HELD, s, t, top, m, e), HELD, s, t, top, m, e, budget,
                  cutoff);
}

static Answer drop(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, int e,
                   double budget, double cutoff) {
    if (budget < dp->own[m * dp->n + t]) {
        Answer a = {INFINITY, INFINITY};
        return a;
    }
    return lookup(dp, block_store(dp, DROP, u, t, top, m, e), DROP, u, t, top, m, e, budget,
                  cutoff);
}

/* ----- the schedule ------------------------------------------------------------------- */

static void emit(DP *dp, Py_ssize_t t, Py_ssize_t first, Py_ssize_t last) {
    if (dp->nops + 3 > dp->opscap) {
        dp->opscap = dp->opscap ? 2 * dp->opscap : 96;
        dp->ops = grow(dp, dp->ops, dp->opscap, sizeof(int));
    }
    dp->ops[dp->nops++] = (int)t;
    dp->ops[dp->nops++] = (int)first;
    dp->ops[dp->nops++] = (int)last;
}

/* _choice: the choice solved for ``budget`` in a store */
static int chosen(DP *dp, const Steps *st, double budget) {
    Py_ssize_t i = steps_find(st, budget);
    if (i < 0 || st->choice[i] == NO_CHOICE) {
        dp->failure = 3;
        longjmp(dp->fail, 1);
    }
    return st->choice[i];
}

static void recomputed_held(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m, int e,
                            double budget);
static void recomputed_drop(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, int e,
                            double budget);

/* recomputed: the forward sweeps of best(s, t, top, budget), the part above first */
static void recomputed(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, double budget) {
    Py_ssize_t n = dp->n, dm;
    int choice, e;
    if (budget >= dp->store_peak[(top * n + s) * n + t]) {
        emit(dp, t, s, t - top);
        return;
    }
    best(dp, s, t, top, budget, INFINITY);
    choice = chosen(dp, seg_store(dp, s, t, top), budget);
    dm = choice / 4;
    e = (choice / 2) % 2;
    if (choice % 2) {
        recomputed_held(dp, s, t, top, s + dm, e, budget);
    } else {
        emit(dp, t, s, s + dm - 1);
        recomputed(dp, s + dm, t, top, budget - dp->base[s]);
    }
    recomputed(dp, s, s + dm - 1, e, budget);
}

static void recomputed_held(DP *dp, Py_ssize_t s, Py_ssize_t t, int top, Py_ssize_t m, int e,
                            double budget) {
    Py_ssize_t j;
    held(dp, s, t, top, m, e, budget, INFINITY);
    j = s + chosen(dp, block_store(dp, HELD, s, t, top, m, e), budget);
    emit(dp, t, s, j);
    if (m == j + 1)
        recomputed(dp, j + 1, t, top, budget - dp->base[s]);
    else
        recomputed_drop(dp, j + 1, t, top, m, e, budget - dp->base[s]);
}

static void recomputed_drop(DP *dp, Py_ssize_t u, Py_ssize_t t, int top, Py_ssize_t m, int e,
                            double budget) {
    int choice;
    drop(dp, u, t, top, m, e, budget, INFINITY);
    choice = chosen(dp, block_store(dp, DROP, u, t, top, m, e), budget);
    if (choice % 2 == 0) {
        Py_ssize_t j = u + choice / 4;
        emit(dp, t, u, j);
        if (m == j + 1)
            recomputed(dp, j + 1, t, top, budget);
        else
            recomputed_drop(dp, j + 1, t, top, m, e, budget);
    } else {
        Py_ssize_t mp = u + choice / 4;
        int e2 = (choice / 2) % 2;
        recomputed_held(dp, u, t, top, mp, e2, budget);
        recomputed_drop(dp, u, mp - 1, e2, m, e, budget);
    }
}

/* ----- the module --------------------------------------------------------------------- */

/* a buffer of ``count`` items of ``size`` bytes */
static int sized(Py_buffer *view, Py_ssize_t count, Py_ssize_t size, const char *name) {
    if (view->len != count * size) {
        PyErr_Format(PyExc_ValueError, "_chain_dp_c: %s holds %zd bytes, expected %zd items "
                     "of %zd bytes", name, view->len, count, size);
        return 0;
    }
    return 1;
}

/* a buffer of ``count`` doubles */
static int table(Py_buffer *view, Py_ssize_t count, const char *name) {
    return sized(view, count, (Py_ssize_t)sizeof(double), name);
}

static void free_store(Steps *st) {
    free(st->low); free(st->high); free(st->cost); free(st->choice);
    free(st->above_at); free(st->above);
}

static void release(DP *dp) {
    Table *tb = &dp->blocks;
    if (dp->steps) {
        for (Py_ssize_t k = 0; k < dp->nsteps; k++) free_store(&dp->steps[k]);
        free(dp->steps);
    }
    for (Py_ssize_t b = 0; b < tb->nblocks; b++) {
        Py_ssize_t count = b + 1 < tb->nblocks ? BLOCK : tb->inblock;
        for (Py_ssize_t k = 0; k < count; k++) free_store(&tb->blocks[b][k]);
        free(tb->blocks[b]);
    }
    free(tb->blocks); free(tb->keys); free(tb->stores);
    free(dp->ops);
    while (dp->nscratch) done_sweep(dp);
    free(dp->scratch);
}

/* a kept recursion: its stores, and the tables it reads (held until it is freed) */
#define TABLES 12
#define STATE "remat.chain_dp_state"
typedef struct {
    DP dp;
    Py_buffer views[TABLES];
    int broken; /* out of memory or a lost interval: its stores cannot be trusted */
} State;

static void free_state(PyObject *capsule) {
    State *st = PyCapsule_GetPointer(capsule, STATE);
    if (!st) return;
    release(&st->dp);
    for (int k = 0; k < TABLES; k++) PyBuffer_Release(&st->views[k]);
    free(st);
}

/* the root's answer at ``budget`` (Python's ``best``) and its schedule's sweeps (dp->ops);
 * no Python calls unless dp->threaded is 0. Returns dp->failure (0: done). */
static int search(DP *dp, double budget, double cutoff, Answer *root) {
    dp->nops = 0;
    dp->failure = 0;
    if (setjmp(dp->fail)) {
        while (dp->nscratch) done_sweep(dp); /* every store holds finished searches only */
        return dp->failure;
    }
    *root = best(dp, 0, dp->n - 1, 0, budget, cutoff);
    if (root->peak < INFINITY) recomputed(dp, 0, dp->n - 1, 0, budget);
    return 0;
}

/* the root's answer at ``budget`` (Python's ``best``), then its schedule; stores kept */
static PyObject *run(DP *dp, double budget, double cutoff, int threaded) {
    Answer root = {INFINITY, INFINITY};
    long long before = dp->solves;
    PyObject *sweeps;
    int failure;
    dp->threaded = threaded;
    if (threaded) {
        Py_BEGIN_ALLOW_THREADS
        failure = search(dp, budget, cutoff, &root);
        Py_END_ALLOW_THREADS
    } else {
        failure = search(dp, budget, cutoff, &root);
    }
    dp->threaded = 0;
    if (failure == 1) Py_RETURN_NONE;
    if (failure == 2) return PyErr_NoMemory();
    if (failure == 4) return NULL;
    if (failure) {
        PyErr_SetString(PyExc_RuntimeError, "_chain_dp_c: a solved budget lost its interval "
                        "while rebuilding the schedule; please report this chain");
        return NULL;
    }
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
    return Py_BuildValue("ddLN", root.cost, root.peak, dp->solves - before, sweeps);
}

static PyObject *new_state(PyObject *self, PyObject *args) {
    Py_ssize_t n, segments;
    int extended;
    State *st = calloc(1, sizeof(State));
    Py_buffer *v;
    DP *dp;
    PyObject *out = NULL;
    (void)self;
    if (!st) return PyErr_NoMemory();
    v = st->views;
    dp = &st->dp;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*y*y*y*y*y*y*y*np|z*", &n, &v[0], &v[1], &v[2],
                          &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &segments,
                          &extended, &v[11])) {
        free(st);
        return NULL;
    }
    if (v[11].buf && extended) {
        PyErr_SetString(PyExc_ValueError, "_chain_dp_c: a mask of stored checkpoints is for "
                        "the persistent recursion only");
    } else if (n >= 1 && segments >= 1 && table(&v[0], n + 1, "fp") && table(&v[1], n + 1, "bp") &&
        table(&v[2], n, "fcost") && table(&v[3], n, "mem") && table(&v[4], n, "fws") &&
        table(&v[5], n + 1, "grad") && table(&v[6], n, "base") && table(&v[7], n * n, "need") &&
        table(&v[8], n * n, "own") && table(&v[9], 2 * n * n, "store_peak") &&
        sized(&v[10], n * n, (Py_ssize_t)sizeof(int), "segment") &&
        (!v[11].buf || sized(&v[11], n, 1, "stored"))) {
        dp->n = n;
        dp->extended = extended;
        dp->fp = v[0].buf; dp->bp = v[1].buf; dp->fcost = v[2].buf; dp->mem = v[3].buf;
        dp->fws = v[4].buf; dp->grad = v[5].buf; dp->base = v[6].buf; dp->need = v[7].buf;
        dp->own = v[8].buf; dp->store_peak = v[9].buf; dp->segment = v[10].buf;
        dp->stored = v[11].buf;
        dp->nsteps = 2 * segments;
        dp->steps = calloc((size_t)dp->nsteps, sizeof(Steps));
        if (!dp->steps) PyErr_NoMemory();
        else out = PyCapsule_New(st, STATE, free_state);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "_chain_dp_c: n and segments must be >= 1");
    }
    if (!out) {
        release(dp);
        for (int k = 0; k < TABLES; k++) PyBuffer_Release(&v[k]);
        free(st);
    }
    return out;
}

static PyObject *solve(PyObject *self, PyObject *args) {
    PyObject *capsule, *out;
    double budget, cutoff, seconds;
    int threaded = 0;
    State *st;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oddd|p", &capsule, &budget, &cutoff, &seconds, &threaded))
        return NULL;
    st = PyCapsule_GetPointer(capsule, STATE);
    if (!st) return NULL;
    if (st->broken) {
        PyErr_SetString(PyExc_RuntimeError, "_chain_dp_c: this state failed before; make a "
                        "new one");
        return NULL;
    }
    st->dp.deadline = seconds < 0 ? -1.0 : now() + seconds;
    out = run(&st->dp, budget, cutoff, threaded);
    if (!out && (st->dp.failure == 2 || st->dp.failure == 3)) st->broken = 1;
    return out;
}

static PyObject *stop(PyObject *self, PyObject *args) {
    PyObject *capsule;
    int flag;
    State *st;
    (void)self;
    if (!PyArg_ParseTuple(args, "Op", &capsule, &flag)) return NULL;
    st = PyCapsule_GetPointer(capsule, STATE);
    if (!st) return NULL;
    st->dp.stop = flag;
    Py_RETURN_NONE;
}

/* least_peak(n, fp, mem, fws, base, above, single_peak, single_cost): ``least_peak_tables`` of
 * chain_dp.py (the persistent schedules of least peak, max for +), the same float operations
 * and ties; returns (peak, cost, first, keep) as bytes: 2 * n * n doubles, doubles, C ints, C
 * ints, each [top][s][t]. */
static PyObject *least_peak(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    Py_buffer fp, mem, fws, base, above, single_peak, single_cost;
    PyObject *out = NULL;
    double *peak = NULL, *cost = NULL;
    int *first = NULL, *keep = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*y*y*y*", &n, &fp, &mem, &fws, &base, &above,
                          &single_peak, &single_cost))
        return NULL;
    if (n >= 1 && table(&fp, n + 1, "fp") && table(&mem, n, "mem") && table(&fws, n, "fws") &&
        table(&base, n, "base") && table(&above, n, "above") &&
        table(&single_peak, 2 * n, "single_peak") && table(&single_cost, 2 * n, "single_cost")) {
        size_t cells = (size_t)(2 * n * n);
        peak = malloc(cells * sizeof(double));
        cost = malloc(cells * sizeof(double));
        first = calloc(cells, sizeof(int));
        keep = calloc(cells, sizeof(int));
        if (!peak || !cost || !first || !keep) {
            PyErr_NoMemory();
        } else {
            const double *f = fp.buf, *m = mem.buf, *w = fws.buf, *b = base.buf;
            const double *a = above.buf, *sp = single_peak.buf, *sc = single_cost.buf;
#define AT(top, s, t) (((Py_ssize_t)(top) * n + (s)) * n + (t))
            for (size_t k = 0; k < cells; k++) peak[k] = cost[k] = INFINITY;
            for (int top = 0; top < 2; top++)
                for (Py_ssize_t i = 0; i < n; i++) {
                    peak[AT(top, i, i)] = sp[top * n + i];
                    cost[AT(top, i, i)] = sc[top * n + i];
                }
            for (Py_ssize_t length = 1; length < n; length++) {
                if (PyErr_CheckSignals() < 0) break; /* Ctrl-C: its exception, no tables */
                for (Py_ssize_t s = 0; s + length < n; s++) {
                    Py_ssize_t t = s + length;
                    double offset = b[s] + a[t];
                    for (int top = 0; top < 2; top++) {
                        double run = -INFINITY, best_p = INFINITY, best_c = INFINITY;
                        int pick = -1, pick_kept = 0;
                        for (Py_ssize_t j = s; j < t; j++) {
                            double pair = m[j] + w[j] + (j > s ? m[j - 1] : 0.0);
                            double sweep, outer, outer_cost, p1, c1, p0, c0, p, c;
                            int kept;
                            run = pymax(run, pair);
                            sweep = run + offset;
                            outer = pymax(sweep + m[t] * top, b[s] + peak[AT(top, j + 1, t)]);
                            outer_cost = f[j + 1] - f[s] + cost[AT(top, j + 1, t)];
                            p1 = pymax(outer, peak[AT(1, s, j)]);
                            c1 = outer_cost + cost[AT(1, s, j)];
                            p0 = pymax(outer, peak[AT(0, s, j)]);
                            c0 = outer_cost + cost[AT(0, s, j)];
                            kept = p1 < p0 || (p1 == p0 && c1 < c0);
                            p = kept ? p1 : p0;
                            c = kept ? c1 : c0;
                            if (pick < 0 || p < best_p || (p == best_p && c < best_c)) {
                                best_p = p;
                                best_c = c;
                                pick = (int)(j - s);
                                pick_kept = kept;
                            }
                        }
                        peak[AT(top, s, t)] = best_p;
                        cost[AT(top, s, t)] = best_c;
                        first[AT(top, s, t)] = (int)s + pick;
                        keep[AT(top, s, t)] = pick_kept;
                    }
                }
            }
#undef AT
            Py_ssize_t doubles = (Py_ssize_t)(cells * sizeof(double));
            Py_ssize_t ints = (Py_ssize_t)(cells * sizeof(int));
            if (!PyErr_Occurred())
                out = Py_BuildValue("y#y#y#y#", (const char *)peak, doubles, (const char *)cost,
                                doubles, (const char *)first, ints, (const char *)keep, ints);
        }
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "_chain_dp_c: n must be >= 1");
    }
    free(peak); free(cost); free(first); free(keep);
    PyBuffer_Release(&fp); PyBuffer_Release(&mem); PyBuffer_Release(&fws);
    PyBuffer_Release(&base); PyBuffer_Release(&above); PyBuffer_Release(&single_peak);
    PyBuffer_Release(&single_cost);
    return out;
}

static PyMethodDef methods[] = {
    {"new_state", new_state, METH_VARARGS,
     "new_state(n, fp, bp, fcost, mem, fws, grad, base, need, own, store_peak, segment, "
     "segments, extended) -> a recursion whose stores solve() keeps"},
    {"solve", solve, METH_VARARGS,
     "solve(state, budget, cutoff, seconds, threaded=False) -> None past the time limit, else "
     "(cost, peak, solves, sweeps); unthreaded, a signal handler's exception is raised"},
    {"stop", stop, METH_VARARGS,
     "stop(state, flag): while flag is true, solve() ends as past its time limit"},
    {"least_peak", least_peak, METH_VARARGS,
     "least_peak(n, fp, mem, fws, base, above, single_peak, single_cost) -> (peak, cost, first, "
     "keep) as bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_chain_dp_c",
    "chain-dp's recursions in C (see remat/solvers/chain_dp.py)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chain_dp_c(void) { return PyModule_Create(&module); }
