/* ``cheapest_r`` and ``s_from_r`` (remat/schedule/rs.py) in C: the same matrices as the numpy
 * code, which validates its input first and stays the fallback where this module was not built
 * (tests/test_schedule.py compares the two on random schedules).
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

/* Parse (matrix, out, indptr, indices) and check their sizes; 0 on error (raised). The CSR
 * itself is trusted: rs.py passes a graph's own ``dep_edges`` (indices in [0, T), indptr
 * non-decreasing, both checked when the graph was built). */
static int parse(PyObject *args, Args *a) {
    if (!PyArg_ParseTuple(args, "y*w*y*y*", &a->first, &a->second, &a->indptr, &a->indices))
        return 0;
    Py_ssize_t size = a->indptr.len / (Py_ssize_t)sizeof(int64_t) - 1;
    a->size = size;
    const int64_t *indptr = a->indptr.buf;
    if (size < 0 || a->first.len != size * size || a->second.len != size * size ||
            indptr[size] * (Py_ssize_t)sizeof(int64_t) != a->indices.len) {
        release(a);
        PyErr_SetString(PyExc_ValueError, "matrices of T x T bytes and a CSR of T + 1 rows");
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

static PyObject *cheapest_r(PyObject *self, PyObject *args) {
    Args a;
    if (!parse(args, &a)) return NULL;
    Py_ssize_t n = a.size;
    const uint8_t *S = a.first.buf;
    uint8_t *R = a.second.buf;
    const int64_t *indptr = a.indptr.buf, *indices = a.indices.buf;
    int64_t *stack = malloc((n > 0 ? n : 1) * sizeof(int64_t));
    int64_t *kept = malloc((n > 0 ? n : 1) * sizeof(int64_t));
    if (stack == NULL || kept == NULL) {
        free(stack), free(kept);
        release(&a);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t t = 0; t < n; t++) {
        const uint8_t *s = S + t * n;
        uint8_t *r = R + t * n;
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

static PyMethodDef methods[] = {
    {"cheapest_r", cheapest_r, METH_VARARGS,
     "cheapest_r(S, R, indptr, indices) -> None: R (zeroed) becomes the least R for S"},
    {"s_from_r", s_from_r, METH_VARARGS,
     "s_from_r(R, S, indptr, indices) -> None, or (stage, reader, value) of the first read "
     "no earlier stage computes: S (zeroed) becomes the least S for R"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rs_c", "cheapest_r and s_from_r in C (remat/schedule/rs.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__rs_c(void) { return PyModule_Create(&module); }
