/* The compiled match of one process group's collectives across its members (analysis/matching.py): a job-level
 * view matches every group each pass (~6000 groups, ~65000 members at 16384 ranks), and match_group's Python
 * glue, a few lookups and calls per member, was ~5 % of the view's analysis (optional: without a compiler
 * the Python does it).
 *
 * match_group(cols, GroupTrace) -> (matched, [(seq, {rank: id})]): matching.match_group's count and
 *     disagreements, read from the members' seq columns and their signature ids (bytes) in place
 *
 * It answers NotImplemented, with no exception, where an input is not of the kind it reads (ids not bytes, a
 * column not a GroupTrace's) or a seq is too large for its arithmetic to be exact in 64 bits: the Python then
 * does it, exactly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_group_columns.h"

static PyObject *str_seq; /* interned at import */

#define SEQ_BOUND ((int64_t)1 << 61) /* seqs within +-2^61: every sum and difference below stays exact */

typedef struct {
    PyObject *rank;
    long long r;
    Py_buffer view;
    int held;
    const int64_t *seq;
    Py_ssize_t n;
    const unsigned char *ids;
} Col;

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Values;

static int push(Values *a, int64_t x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? 2 * a->cap : 64;
        int64_t *v = PyMem_Realloc(a->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return PyErr_NoMemory(), -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int by_pair(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

static int contiguous(const Col *c) {
    return c->seq[c->n - 1] - c->seq[0] + 1 == c->n;
}

/* GroupTrace.position: the index of seq s, or -1 */
static Py_ssize_t position(const Col *c, int64_t s) {
    int64_t i = s - c->seq[0];
    if (i >= 0 && i < c->n && c->seq[i] == s)
        return (Py_ssize_t)i;
    Py_ssize_t lo = bisect_left_q(c->seq, c->n, s);
    return lo < c->n && c->seq[lo] == s ? lo : -1;
}

/* Each present member's column (len(seq) > 0), in the dict's order: 0, ODD (not of its kind), or -1. */
#define ODD 2
static int load_cols(PyObject *cols, PyObject *group_type, Col *c, Py_ssize_t *np) {
    Py_ssize_t pos = 0;
    PyObject *r, *v;
    *np = 0;
    while (PyDict_Next(cols, &pos, &r, &v)) {
        if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 2 || !PyLong_CheckExact(r))
            return ODD;
        Col *col = &c[*np];
        int overflow;
        col->r = PyLong_AsLongLongAndOverflow(r, &overflow);
        if (overflow || (col->r == -1 && PyErr_Occurred()))
            return PyErr_Clear(), ODD;
        Py_ssize_t len = 0;
        int rc = group_columns(PyTuple_GET_ITEM(v, 0), group_type, 1, &str_seq, "q", &col->view, &col->held, &len);
        if (rc != 0) {
            release_views(&col->view, &col->held);
            return rc == COLUMNS_ODD ? ODD : rc;
        }
        if (len == 0) {
            release_views(&col->view, &col->held);
            continue;
        }
        (*np)++;
        PyObject *ids = PyTuple_GET_ITEM(v, 1);
        if (!PyBytes_CheckExact(ids) || PyBytes_GET_SIZE(ids) != len)
            return ODD;
        col->rank = r;
        col->seq = col->view.buf;
        col->n = len;
        col->ids = (const unsigned char *)PyBytes_AS_STRING(ids);
        for (Py_ssize_t k = 0; k < len; k++)
            if (col->seq[k] >= SEQ_BOUND || col->seq[k] <= -SEQ_BOUND)
                return ODD;
    }
    return 0;
}

/* The disagreement at seq s, (s, {rank: id}), or Py_None where the members holding s agree */
static PyObject *votes_at(const Col *c, Py_ssize_t np, int64_t s, int *found) {
    int first = -1, differ = 0, n = 0;
    for (Py_ssize_t i = 0; i < np; i++) {
        Py_ssize_t j = position(&c[i], s);
        if (j < 0)
            continue;
        n++;
        if (first < 0)
            first = c[i].ids[j];
        else if (c[i].ids[j] != first)
            differ = 1;
    }
    *found = n >= 2 && differ;
    if (!*found)
        return Py_NewRef(Py_None);
    PyObject *votes = PyDict_New();
    for (Py_ssize_t i = 0; votes != NULL && i < np; i++) {
        Py_ssize_t j = position(&c[i], s);
        PyObject *id = j < 0 ? NULL : PyLong_FromLong(c[i].ids[j]);
        if (j >= 0 && (id == NULL || PyDict_SetItem(votes, c[i].rank, id) < 0))
            Py_CLEAR(votes);
        Py_XDECREF(id);
    }
    return votes == NULL ? NULL : Py_BuildValue("(LN)", (long long)s, votes);
}

/* matching._covered_count: how many of the pivot's seqs some other member holds (windows as (lo, hi) pairs) */
static int64_t covered_count(int64_t *windows, Py_ssize_t n, const Col *pivot) {
    if (n > 1)
        qsort(windows, (size_t)n, 2 * sizeof *windows, by_pair);
    Py_ssize_t m = 0; /* merged in place */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t lo = windows[2 * i], hi = windows[2 * i + 1];
        if (m && lo <= windows[2 * m - 1] + 1) {
            if (hi > windows[2 * m - 1])
                windows[2 * m - 1] = hi;
        } else {
            windows[2 * m] = lo;
            windows[2 * m + 1] = hi;
            m++;
        }
    }
    int64_t count = 0;
    if (contiguous(pivot)) {
        for (Py_ssize_t i = 0; i < m; i++)
            count += windows[2 * i + 1] - windows[2 * i] + 1;
        return count;
    }
    for (Py_ssize_t k = 0; k < pivot->n; k++)
        for (Py_ssize_t i = 0; i < m; i++)
            if (windows[2 * i] <= pivot->seq[k] && pivot->seq[k] <= windows[2 * i + 1]) {
                count++;
                break;
            }
    return count;
}

/* matching.match_group (see there): the pivot's window against each other member's, seqs outside it among the
 * others, and the votes at each suspicious seq */
static PyObject *compare(const Col *c, Py_ssize_t np) {
    Py_ssize_t p = 0;
    for (Py_ssize_t i = 1; i < np; i++) /* the longest column; between equals, the lowest rank */
        if (c[i].n > c[p].n || (c[i].n == c[p].n && c[i].r < c[p].r))
            p = i;
    const Col *pg = &c[p];
    int64_t p_first = pg->seq[0], p_last = pg->seq[pg->n - 1];
    int p_contiguous = contiguous(pg);
    Values suspicious = {0}, windows = {0}, outside = {0};
    PyObject *out = NULL, *found = NULL;
    for (Py_ssize_t i = 0; i < np; i++) {
        if (i == p)
            continue;
        const Col *g = &c[i];
        int64_t g_first = g->seq[0], g_last = g->seq[g->n - 1];
        int64_t lo = p_first > g_first ? p_first : g_first, hi = p_last < g_last ? p_last : g_last;
        if (lo <= hi) {
            if (push(&windows, lo) < 0 || push(&windows, hi) < 0)
                goto fail;
            if (p_contiguous && contiguous(g)) {
                const unsigned char *a = pg->ids + (lo - p_first), *b = g->ids + (lo - g_first);
                for (int64_t k = 0; k <= hi - lo; k++)
                    if (a[k] != b[k] && push(&suspicious, lo + k) < 0)
                        goto fail;
            } else
                for (Py_ssize_t k = 0; k < g->n; k++) {
                    int64_t s = g->seq[k];
                    if (lo <= s && s <= hi) {
                        Py_ssize_t j = position(pg, s);
                        if ((j < 0 || pg->ids[j] != g->ids[k]) && push(&suspicious, s) < 0)
                            goto fail;
                    }
                }
        }
        if (g_first < p_first || g_last > p_last) {
            Py_ssize_t left = bisect_left_q(g->seq, g->n, p_first), right = bisect_right_q(g->seq, g->n, p_last);
            for (Py_ssize_t k = 0; k < left; k++)
                if (push(&outside, g->seq[k]) < 0)
                    goto fail;
            for (Py_ssize_t k = right; k < g->n; k++)
                if (push(&outside, g->seq[k]) < 0)
                    goto fail;
        }
    }
    int64_t shared_outside = 0; /* seqs outside the pivot's window that two or more others hold */
    if (outside.n > 1)
        qsort(outside.v, (size_t)outside.n, sizeof *outside.v, by_value);
    for (Py_ssize_t k = 0; k < outside.n;) {
        Py_ssize_t e = k;
        while (e < outside.n && outside.v[e] == outside.v[k])
            e++;
        if (e - k >= 2) {
            shared_outside++;
            if (push(&suspicious, outside.v[k]) < 0)
                goto fail;
        }
        k = e;
    }
    if (suspicious.n > 1)
        qsort(suspicious.v, (size_t)suspicious.n, sizeof *suspicious.v, by_value);
    if ((found = PyList_New(0)) == NULL)
        goto fail;
    for (Py_ssize_t k = 0; k < suspicious.n; k++) {
        if (k && suspicious.v[k] == suspicious.v[k - 1])
            continue;
        int disagree;
        PyObject *d = votes_at(c, np, suspicious.v[k], &disagree);
        if (d == NULL || (disagree && PyList_Append(found, d) < 0)) {
            Py_XDECREF(d);
            goto fail;
        }
        Py_DECREF(d);
    }
    int64_t shared = covered_count(windows.v, windows.n / 2, pg) + shared_outside;
    int64_t matched = shared - PyList_GET_SIZE(found);
    out = Py_BuildValue("(LO)", (long long)(matched > 0 ? matched : 0), found);
fail:
    Py_XDECREF(found);
    PyMem_Free(suspicious.v);
    PyMem_Free(windows.v);
    PyMem_Free(outside.v);
    return out;
}

static PyObject *match_group(PyObject *self, PyObject *args) {
    PyObject *cols, *group_type;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &cols, &group_type))
        return NULL;
    Py_ssize_t m = PyDict_GET_SIZE(cols), np = 0;
    Col *c = PyMem_Calloc((size_t)(m ? m : 1), sizeof *c);
    if (c == NULL)
        return PyErr_NoMemory();
    int rc = load_cols(cols, group_type, c, &np);
    PyObject *out = rc < 0 ? NULL : rc == ODD ? Py_NewRef(Py_NotImplemented)
                  : np < 2 ? Py_BuildValue("(i[])", 0) : compare(c, np);
    for (Py_ssize_t i = 0; i < m; i++)
        release_views(&c[i].view, &c[i].held);
    PyMem_Free(c);
    return out;
}

static PyMethodDef methods[] = {
    {"match_group", match_group, METH_VARARGS,
     "match_group({rank: (GroupTrace, ids)}, GroupTrace) -> (matched, [(seq, {rank: id})]), or NotImplemented"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_matching", NULL, -1, methods};

PyMODINIT_FUNC PyInit__matching(void) {
    if ((str_seq = PyUnicode_InternFromString("seq")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
