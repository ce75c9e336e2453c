/* ``cheapest_r``, ``s_from_r`` and ``tighten`` from a fixed point (remat/schedule/rs.py) in C:
 * the same matrices as the numpy code, which validates its input first and stays the fallback
 * where this module was not built (tests/test_schedule.py compares the two on random
 * schedules).
 *
 * cheapest_r(S, R, indptr, indices)
 *   S: T x T bytes (0/1, C order), R: the same, zeroed, written; indptr (T + 1), indices: each
 *   node's dependencies as int64 CSR. R[t] becomes node t, every value S keeps into stage t+1
 *   that is not resident at stage t, and, recursively, every input of those neither resident
 *   (S[t]) nor computed in the stage already.
 * s_from_r(R, S, indptr, indices)
 *   S zeroed, written: each value resident from the event (computation or read) before each
 *   read of it, in a stage that does not compute it, up to that read. Returns None, or (stage,
 *   reader, value) for the first read (by stage, reader, then the reader's dependency order)
 *   that no earlier stage computes; S is then unspecified.
 * tighten_from(S, R, S_out, indptr, indices, users_indptr, users_indices)
 *   ``tighten`` of S from (R, S_out), a fixed point of ``tighten`` that S differs from in a
 *   few rows, which it overwrites with the fixed point of S: each step derives again only
 *   the rows of R next to the rows of S that changed (row t depends only on S[t] and
 *   S[t + 1]) and the columns of S of the values whose column of R changed and of their
 *   inputs (column v depends only on v's column of R and its users'; users_*: each node's
 *   users as int64 CSR, trusted as ``indptr`` is). Returns True, or False where a row of S
 *   that differs from S_out keeps a value at or after its own stage, or a read comes before
 *   any computation (R and S_out are then unspecified).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_buffer first, second, indptr, indices;
    Py_ssize_t size;
} Args;

static void release(Args *a) {
    PyBuffer_Release(&a->first);
    PyBuffer_Release(&a->second);
    PyBuffer_Release(&a->indptr);
    PyBuffer_Release(&a->indices);
}

/* Check the sizes of parsed (matrix, out, indptr, indices); 0 on error (raised). The CSR
 * itself is trusted: rs.py passes a graph's own ``dep_edges`` (indices in [0, T), indptr
 * non-decreasing, both checked when the graph was built). */
static int sized(Args *a) {
    Py_ssize_t size = a->indptr.len / (Py_ssize_t)sizeof(int64_t) - 1;
    a->size = size;
    const int64_t *indptr = a->indptr.buf;
    if (size < 0 || a->first.len != size * size || a->second.len != size * size ||
            indptr[size] * (Py_ssize_t)sizeof(int64_t) != a->indices.len) {
        PyErr_SetString(PyExc_ValueError, "matrices of T x T bytes and a CSR of T + 1 rows");
        return 0;
    }
    return 1;
}

/* Parse (matrix, out, indptr, indices) and check their sizes; 0 on error (raised). */
static int parse(PyObject *args, Args *a) {
    if (!PyArg_ParseTuple(args, "y*w*y*y*", &a->first, &a->second, &a->indptr, &a->indices))
        return 0;
    if (!sized(a)) {
        release(a);
        return 0;
    }
    return 1;
}

/* The indices of the nonzero bytes of ``row`` (n of them) into ``out``; their count. Eight
 * bytes at a time: a schedule's rows are mostly zero. */
static Py_ssize_t nonzero(const uint8_t *row, Py_ssize_t n, int64_t *out) {
    Py_ssize_t count = 0, k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t word;
        memcpy(&word, row + k, 8);
        if (!word) continue;
        for (Py_ssize_t j = k; j < k + 8; j++)
            if (row[j]) out[count++] = j;
    }
    for (; k < n; k++)
        if (row[k]) out[count++] = k;
    return count;
}

/* Row t of ``cheapest_r`` into r (zeroed): node t, each value kept into stage t + 1 that is
 * not resident at stage t, and recursively every input of those neither resident nor
 * computed in the stage already. ``stack`` and ``kept`` hold n values. */
static void r_row(const uint8_t *S, uint8_t *r, Py_ssize_t n, Py_ssize_t t,
                  const int64_t *indptr, const int64_t *indices, int64_t *stack,
                  int64_t *kept) {
    const uint8_t *s = S + t * n;
    Py_ssize_t top = 0;
    r[t] = 1;
    stack[top++] = t;
    Py_ssize_t count = t + 1 < n ? nonzero(S + (t + 1) * n, n, kept) : 0;
    for (Py_ssize_t c = 0; c < count; c++) {  /* kept into stage t+1, not resident */
        int64_t v = kept[c];
        if (!s[v] && !r[v]) {
            r[v] = 1;
            stack[top++] = v;
        }
    }
    while (top > 0) {
        int64_t k = stack[--top];
        for (int64_t e = indptr[k]; e < indptr[k + 1]; e++) {
            int64_t d = indices[e];
            if (!s[d] && !r[d]) {
                r[d] = 1;
                stack[top++] = d;
            }
        }
    }
}

static PyObject *cheapest_r(PyObject *self, PyObject *args) {
    Args a;
    if (!parse(args, &a)) return NULL;
    Py_ssize_t n = a.size;
    int64_t *stack = malloc((n > 0 ? n : 1) * sizeof(int64_t));
    int64_t *kept = malloc((n > 0 ? n : 1) * sizeof(int64_t));
    if (stack == NULL || kept == NULL) {
        free(stack), free(kept);
        release(&a);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t t = 0; t < n; t++)
        r_row(a.first.buf, (uint8_t *)a.second.buf + t * n, n, t, a.indptr.buf,
              a.indices.buf, stack, kept);
    free(stack), free(kept);
    release(&a);
    Py_RETURN_NONE;
}

static PyObject *s_from_r(PyObject *self, PyObject *args) {
    Args a;
    if (!parse(args, &a)) return NULL;
    Py_ssize_t n = a.size, m = n > 0 ? n : 1;
    const uint8_t *R = a.first.buf;
    uint8_t *S = a.second.buf;
    const int64_t *indptr = a.indptr.buf, *indices = a.indices.buf;
    uint8_t *read = calloc(m, 1), *computed = calloc(m, 1);  /* computed: in a stage before */
    int64_t *last = malloc(m * sizeof(int64_t));  /* each value's last event (stage) */
    int64_t *comps = malloc(m * sizeof(int64_t)), *reads = malloc(m * sizeof(int64_t));
    if (!read || !computed || !last || !comps || !reads) {
        free(read), free(computed), free(last), free(comps), free(reads);
        release(&a);
        return PyErr_NoMemory();
    }
    PyObject *result = Py_None;
    for (Py_ssize_t t = 0; t < n && result == Py_None; t++) {
        const uint8_t *r = R + t * n;
        Py_ssize_t count = nonzero(r, n, comps), found = 0;
        for (Py_ssize_t c = 0; c < count && result == Py_None; c++) {
            int64_t k = comps[c];
            for (int64_t e = indptr[k]; e < indptr[k + 1]; e++) {
                int64_t d = indices[e];
                if (r[d] || read[d]) continue;  /* from this stage's own copy, or counted */
                if (!computed[d]) {
                    result = Py_BuildValue("(nLL)", t, (long long)k, (long long)d);
                    break;
                }
                read[d] = 1;
                reads[found++] = d;
            }
        }
        for (Py_ssize_t c = 0; c < found; c++) {  /* resident since its last event */
            int64_t d = reads[c];
            for (int64_t u = last[d] + 1; u <= t; u++) S[u * n + d] = 1;
            last[d] = t, read[d] = 0;
        }
        for (Py_ssize_t c = 0; c < count; c++) last[comps[c]] = t, computed[comps[c]] = 1;
    }
    free(read), free(computed), free(last), free(comps), free(reads);
    release(&a);
    if (result == Py_None) Py_RETURN_NONE;
    return result;
}

/* Indices in [0, n), each at most once: a list and a mark per index. */
typedef struct {
    int64_t *list;
    uint8_t *mark;
    Py_ssize_t count;
} Set;

static void add(Set *set, int64_t i) {
    if (!set->mark[i]) set->mark[i] = 1, set->list[set->count++] = i;
}

static void clear(Set *set) {
    for (Py_ssize_t k = 0; k < set->count; k++) set->mark[set->list[k]] = 0;
    set->count = 0;
}

/* ``s_from_r``'s columns ``columns`` of S derived again from R, stage by stage (rows of R
 * and S stay in cache; the column form of ``s_from_r``'s rule, which a whole S gets faster
 * from the loop over computations above; tests/test_schedule.py holds the two equal through
 * ``tighten``): each value resident from the event before each read of it (a stage
 * that computes a user of it but not the value itself) up to that read. The stages where a
 * column changed go to ``moved``; 0 where a read comes before any computation. ``old``
 * holds n bytes per column (stage-major), ``last`` n values. */
static int s_columns(const uint8_t *R, uint8_t *S, Py_ssize_t n, const Set *columns,
                     const int64_t *users_indptr, const int64_t *users_indices,
                     uint8_t *old, int64_t *last, Set *moved) {
    Py_ssize_t count = columns->count;
    const int64_t *column = columns->list;
    for (Py_ssize_t t = 0; t < n; t++)
        for (Py_ssize_t k = 0; k < count; k++) {
            old[t * count + k] = S[t * n + column[k]];
            S[t * n + column[k]] = 0;
        }
    for (Py_ssize_t k = 0; k < count; k++) last[k] = -2;  /* -2: not computed yet */
    for (Py_ssize_t t = 0; t < n; t++) {
        const uint8_t *r = R + t * n;
        for (Py_ssize_t k = 0; k < count; k++) {
            int64_t v = column[k];
            if (r[v]) {
                last[k] = t;
                continue;
            }
            int read = 0;
            for (int64_t e = users_indptr[v]; e < users_indptr[v + 1] && !read; e++)
                read = r[users_indices[e]];
            if (!read) continue;
            if (last[k] == -2) return 0;
            for (Py_ssize_t u = last[k] + 1; u <= t; u++) S[u * n + v] = 1;
            last[k] = t;
        }
    }
    for (Py_ssize_t t = 0; t < n; t++)
        for (Py_ssize_t k = 0; k < count; k++)
            if (old[t * count + k] != S[t * n + column[k]]) {
                add(moved, t);
                break;
            }
    return 1;
}

enum { ROWS, AGAIN, COLUMNS, TOUCHED, MOVED, SETS };

/* tighten_from's steps on the buffers: 1 on a fixed point, 0 where S breaks a rule. */
static int tighten_steps(const uint8_t *S, uint8_t *R, uint8_t *out, Py_ssize_t n,
                         const int64_t *indptr, const int64_t *indices,
                         const int64_t *users_indptr, const int64_t *users_indices,
                         Set *sets, int64_t *stack, int64_t *kept, uint8_t *old,
                         uint8_t *columns_old, int64_t *last) {
    Set *rows = &sets[ROWS], *again = &sets[AGAIN], *columns = &sets[COLUMNS];
    Set *touched = &sets[TOUCHED], *moved = &sets[MOVED];
    for (Py_ssize_t t = 0; t < n; t++) {  /* the rows S changed; none keeps t or later */
        if (!memcmp(S + t * n, out + t * n, n)) continue;
        for (Py_ssize_t i = t; i < n; i++)
            if (S[t * n + i]) return 0;
        add(rows, t);
    }
    const uint8_t *made = S;  /* R is cheapest_r(made) once its rows are derived again */
    for (;;) {
        clear(again), clear(columns);
        for (Py_ssize_t k = 0; k < rows->count; k++) {
            add(again, rows->list[k]);
            if (rows->list[k] > 0) add(again, rows->list[k] - 1);
        }
        for (Py_ssize_t k = 0; k < again->count; k++) {
            uint8_t *r = R + again->list[k] * n;
            memcpy(old, r, n);
            memset(r, 0, n);
            r_row(made, r, n, again->list[k], indptr, indices, stack, kept);
            for (Py_ssize_t i = 0; i < n; i++)
                if (old[i] != r[i]) add(columns, i);
        }
        if (!columns->count) return 1;
        clear(touched), clear(moved);
        for (Py_ssize_t k = 0; k < columns->count; k++) {
            int64_t c = columns->list[k];
            add(touched, c);
            for (int64_t e = indptr[c]; e < indptr[c + 1]; e++) add(touched, indices[e]);
        }
        if (!s_columns(R, out, n, touched, users_indptr, users_indices, columns_old, last,
                       moved))
            return 0;
        /* the rows where S_out now differs from what R was made from */
        if (made == S) {
            for (Py_ssize_t k = 0; k < moved->count; k++) add(rows, moved->list[k]);
            Py_ssize_t kept_rows = 0;
            for (Py_ssize_t k = 0; k < rows->count; k++) {
                int64_t t = rows->list[k];
                if (memcmp(S + t * n, out + t * n, n)) rows->list[kept_rows++] = t;
                else rows->mark[t] = 0;
            }
            rows->count = kept_rows;
        } else {
            clear(rows);
            for (Py_ssize_t k = 0; k < moved->count; k++) add(rows, moved->list[k]);
        }
        made = out;
    }
}

static PyObject *tighten_from(PyObject *self, PyObject *args) {
    Args a;
    Py_buffer out, users_indptr, users_indices;
    if (!PyArg_ParseTuple(args, "y*w*w*y*y*y*y*", &a.first, &a.second, &out, &a.indptr,
                          &a.indices, &users_indptr, &users_indices))
        return NULL;
    PyObject *result = NULL;
    const int64_t *users = users_indptr.buf;
    if (sized(&a) && out.len == a.first.len &&
            users_indptr.len == (a.size + 1) * (Py_ssize_t)sizeof(int64_t) &&
            users[a.size] * (Py_ssize_t)sizeof(int64_t) == users_indices.len) {
        Py_ssize_t n = a.size, m = n > 0 ? n : 1;
        Set sets[SETS];
        int64_t *lists = malloc(SETS * m * sizeof(int64_t));
        uint8_t *marks = calloc(SETS * m, 1), *old = malloc(m), *columns_old = malloc(m * m);
        int64_t *stack = malloc(m * sizeof(int64_t)), *kept = malloc(m * sizeof(int64_t));
        int64_t *last = malloc(m * sizeof(int64_t));
        if (lists && marks && old && columns_old && stack && kept && last) {
            for (int k = 0; k < SETS; k++)
                sets[k] = (Set){lists + k * m, marks + k * m, 0};
            result = PyBool_FromLong(tighten_steps(
                a.first.buf, a.second.buf, out.buf, n, a.indptr.buf, a.indices.buf,
                users_indptr.buf, users_indices.buf, sets, stack, kept, old, columns_old,
                last));
        } else {
            PyErr_NoMemory();
        }
        free(lists), free(marks), free(old), free(columns_old), free(stack), free(kept);
        free(last);
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "S, R and S_out of T x T bytes, users of T + 1 rows");
    }
    release(&a);
    PyBuffer_Release(&out);
    PyBuffer_Release(&users_indptr), PyBuffer_Release(&users_indices);
    return result;
}

static PyMethodDef methods[] = {
    {"cheapest_r", cheapest_r, METH_VARARGS,
     "cheapest_r(S, R, indptr, indices) -> None: R (zeroed) becomes the least R for S"},
    {"s_from_r", s_from_r, METH_VARARGS,
     "s_from_r(R, S, indptr, indices) -> None, or (stage, reader, value) of the first read "
     "no earlier stage computes: S (zeroed) becomes the least S for R"},
    {"tighten_from", tighten_from, METH_VARARGS,
     "tighten_from(S, R, S_out, indptr, indices, users_indptr, users_indices) -> bool: "
     "(R, S_out), a fixed point, become tighten's fixed point of S; False where S breaks a "
     "rule"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rs_c",
    "cheapest_r, s_from_r and tighten from a fixed point in C (remat/schedule/rs.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__rs_c(void) { return PyModule_Create(&module); }
