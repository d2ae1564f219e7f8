/* The compiled helpers of analysis/straggler.py: the loops over each recent collective and member that a
 * job-level view runs for every group each pass (optional: without a compiler straggler.py does them).
 *
 * waits_in_step(issued, durations) -> each member's waits, seq by seq (straggler._waits_at on each seq)
 * timeline(chunks, shapes) -> per group, what each member owes at each seq of its window (straggler.Owed's
 *     waits): the wait of the member's collective just before
 * last_counts(issued, durations, usable, owed, first, members) -> (by duration, how often each member
 *     arrived last), as find_stragglers counts them
 * counts_of(groups, first, n, owed, members, finished, GroupTrace) -> the same, with the samples, read from the members'
 *     group columns in place (no slices, no Python loop over the members: a job-level view judges ~6000
 *     groups a pass at 16384 ranks)
 * chunks_of(groups, recent, finished, GroupTrace) -> inherited_waits' chunks of one group, from its members' columns
 *
 * Each reads int64 columns (an array('q') or any sequence of ints) and answers None, with no exception,
 * where a value is past 64 bits or a result would be: straggler.py then does the same in Python, exactly.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_group_columns.h"

#define PAST_64_BITS 1 /* load()'s and the loops' answer when Python's ints would go where int64 cannot */

/* obj's values into a new int64 buffer (*n of them): 0, PAST_64_BITS, or -1 with an exception */
static int load(PyObject *obj, int64_t **out, Py_ssize_t *n) {
    Py_buffer view;
    *out = NULL;
    if (PyObject_CheckBuffer(obj) && PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
        int ok = view.itemsize == 8 && view.format != NULL && (!strcmp(view.format, "q") || !strcmp(view.format, "l"));
        if (ok) {
            *n = view.len / 8;
            if ((*out = PyMem_Malloc(view.len ? (size_t)view.len : 1)) != NULL)
                memcpy(*out, view.buf, (size_t)view.len);
        }
        PyBuffer_Release(&view);
        if (ok)
            return *out == NULL ? (PyErr_NoMemory(), -1) : 0;
    }
    PyErr_Clear(); /* not a buffer of int64: read it as a sequence */
    PyObject *fast = PySequence_Fast(obj, "a column is not a sequence");
    if (fast == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(fast);
    if ((*out = PyMem_Malloc(*n ? (size_t)*n * 8 : 1)) == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < *n; i++) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            Py_DECREF(fast);
            PyMem_Free(*out), *out = NULL;
            return overflow ? PAST_64_BITS : -1;
        }
        (*out)[i] = v;
    }
    Py_DECREF(fast);
    return 0;
}

/* every column of a list into int64 buffers of one length: 0, PAST_64_BITS, or -1 with an exception */
static int load_all(PyObject *list, int64_t **cols, Py_ssize_t m, Py_ssize_t *n) {
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t len;
        int rc = load(PyList_GET_ITEM(list, i), &cols[i], &len);
        if (rc == 0 && i && len != *n) {
            PyErr_SetString(PyExc_ValueError, "columns of different lengths");
            rc = -1;
        }
        if (rc != 0)
            return rc;
        *n = len;
    }
    return 0;
}

static void free_all(int64_t **cols, Py_ssize_t m) {
    for (Py_ssize_t i = 0; cols != NULL && i < m; i++)
        PyMem_Free(cols[i]);
    PyMem_Free(cols);
}

/* member by member, seq by seq: (d - shortest) * 1000 where every member has a duration, else last - issued */
static PyObject *waits_in_step(PyObject *self, PyObject *args) {
    PyObject *issued_list, *duration_list, *out = NULL;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &issued_list, &PyList_Type, &duration_list))
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(issued_list), n = 0, n2 = 0;
    if (m == 0 || PyList_GET_SIZE(duration_list) != m) {
        PyErr_SetString(PyExc_ValueError, "waits_in_step: no members, or not as many duration columns");
        return NULL;
    }
    int64_t **issued = PyMem_Calloc((size_t)m, sizeof *issued), **durations = PyMem_Calloc((size_t)m, sizeof *durations);
    int64_t *waits = NULL;
    int rc = issued == NULL || durations == NULL ? (PyErr_NoMemory(), -1) : load_all(issued_list, issued, m, &n);
    if (rc == 0)
        rc = load_all(duration_list, durations, m, &n2);
    if (rc == 0 && n2 != n) {
        PyErr_SetString(PyExc_ValueError, "waits_in_step: columns of different lengths");
        rc = -1;
    }
    if (rc == 0 && (waits = PyMem_Malloc((size_t)(m * n + 1) * 8)) == NULL)
        rc = (PyErr_NoMemory(), -1);
    for (Py_ssize_t j = 0; rc == 0 && j < n; j++) {
        int64_t shortest = durations[0][j], last = issued[0][j];
        for (Py_ssize_t i = 1; i < m; i++) {
            shortest = durations[i][j] < shortest ? durations[i][j] : shortest;
            last = issued[i][j] > last ? issued[i][j] : last;
        }
        for (Py_ssize_t i = 0; rc == 0 && i < m; i++) {
            int64_t *w = &waits[i * n + j];
            if (shortest >= 0 ? __builtin_mul_overflow(durations[i][j] - shortest, (int64_t)1000, w)
                              : __builtin_sub_overflow(last, issued[i][j], w))
                rc = PAST_64_BITS;
        }
    }
    if (rc == 0 && (out = PyList_New(m)) != NULL)
        for (Py_ssize_t i = 0; i < m; i++) {
            PyObject *col = array_q(waits + i * n, n);
            if (col == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, col);
        }
    free_all(issued, m), free_all(durations, m);
    PyMem_Free(waits);
    if (rc == PAST_64_BITS)
        Py_RETURN_NONE;
    return out;
}

typedef struct {
    int64_t issued, seq, waited;
    Py_ssize_t key;    /* the group key's place among the keys, sorted: compares as the key itself does */
    Py_ssize_t member; /* the rank's place among the group's members (the same for every event of a key) */
} Event;

/* as Python compares the tuples (issued, key, seq, waited) */
static int by_issue(const void *a, const void *b) {
    const Event *x = a, *y = b;
    if (x->issued != y->issued)
        return x->issued < y->issued ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->waited < y->waited ? -1 : x->waited > y->waited;
}

/* One group's window of owed waits: member i's at seq s is waits[i * width + s - base]. */
typedef struct {
    int64_t base;
    Py_ssize_t width, members;
    int64_t *waits;
} Owed;

/* one rank's events from its chunks [(key index, member index, seqs, issued, waited)]: 0, PAST_64_BITS or -1 */
static int rank_events(PyObject *chunks, const Owed *shapes, Py_ssize_t n_keys, Event **events, Py_ssize_t *n_events,
                       Py_ssize_t *cap) {
    *n_events = 0;
    if (!PyList_Check(chunks)) {
        PyErr_SetString(PyExc_TypeError, "timeline: a rank's chunks are not a list");
        return -1;
    }
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(chunks); c++) {
        PyObject *chunk = PyList_GET_ITEM(chunks, c);
        if (!PyTuple_Check(chunk) || PyTuple_GET_SIZE(chunk) != 5) {
            PyErr_SetString(PyExc_TypeError, "timeline: a chunk is not (key index, member index, seqs, issued, waited)");
            return -1;
        }
        Py_ssize_t key = PyLong_AsSsize_t(PyTuple_GET_ITEM(chunk, 0)), member = PyLong_AsSsize_t(PyTuple_GET_ITEM(chunk, 1));
        if ((key == -1 || member == -1) && PyErr_Occurred())
            return -1;
        if (key < 0 || key >= n_keys || member < 0 || member >= shapes[key].members) {
            PyErr_SetString(PyExc_IndexError, "timeline: a key or member index out of range");
            return -1;
        }
        int64_t *col[3] = {NULL, NULL, NULL};
        Py_ssize_t len[3] = {0, 0, 0};
        int rc = 0;
        for (int k = 0; rc == 0 && k < 3; k++)
            rc = load(PyTuple_GET_ITEM(chunk, k + 2), &col[k], &len[k]);
        if (rc == 0 && (len[1] != len[0] || len[2] != len[0])) {
            PyErr_SetString(PyExc_ValueError, "timeline: a chunk's columns of different lengths");
            rc = -1;
        }
        if (rc == 0 && *n_events + len[0] > *cap) {
            Py_ssize_t want = (*n_events + len[0]) * 2;
            Event *more = PyMem_Realloc(*events, (size_t)want * sizeof(Event));
            if (more == NULL)
                rc = (PyErr_NoMemory(), -1);
            else
                *events = more, *cap = want;
        }
        for (Py_ssize_t i = 0; rc == 0 && i < len[0]; i++)
            (*events)[(*n_events)++] = (Event){col[1][i], col[0][i], col[2][i], key, member};
        for (int k = 0; k < 3; k++)
            PyMem_Free(col[k]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* shapes: [(base, width, members)] per key index: 0, PAST_64_BITS (a base past 64 bits) or -1 */
static int load_shapes(PyObject *list, Owed *shapes, Py_ssize_t n_keys) {
    for (Py_ssize_t k = 0; k < n_keys; k++) {
        PyObject *t = PyList_GET_ITEM(list, k);
        long long base;
        int overflow = 0;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
            PyErr_SetString(PyExc_TypeError, "timeline: a shape is not (base, width, members)");
            return -1;
        }
        base = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, 0), &overflow);
        if (overflow)
            return PAST_64_BITS;
        shapes[k].base = base;
        shapes[k].width = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        shapes[k].members = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        if (PyErr_Occurred())
            return -1;
        if (shapes[k].width < 0 || shapes[k].members < 0) {
            PyErr_SetString(PyExc_ValueError, "timeline: a negative width or count of members");
            return -1;
        }
        if ((shapes[k].waits = PyMem_Calloc((size_t)(shapes[k].width * shapes[k].members) + 1, 8)) == NULL)
            return (PyErr_NoMemory(), -1);
    }
    return 0;
}

/* timeline(chunks, shapes): per key index, its members' owed waits as one array (Owed's layout) */
static PyObject *timeline(PyObject *self, PyObject *args) {
    PyObject *by_rank, *shape_list;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &by_rank, &PyList_Type, &shape_list))
        return NULL;
    Py_ssize_t n_keys = PyList_GET_SIZE(shape_list), cap = 0, n_events, pos = 0;
    PyObject *rank, *chunks, *out = NULL;
    Owed *shapes = PyMem_Calloc((size_t)n_keys + 1, sizeof *shapes);
    Event *events = NULL;
    int rc = shapes == NULL ? -1 : load_shapes(shape_list, shapes, n_keys);
    while (rc == 0 && PyDict_Next(by_rank, &pos, &rank, &chunks)) {
        if ((rc = rank_events(chunks, shapes, n_keys, &events, &n_events, &cap)) != 0)
            break;
        qsort(events, (size_t)n_events, sizeof(Event), by_issue);
        for (Py_ssize_t i = 1; i < n_events; i++) {
            const Event *e = &events[i];
            const Owed *o = &shapes[e->key];
            int64_t at;
            if (events[i - 1].waited && !__builtin_sub_overflow(e->seq, o->base, &at) && at >= 0 && at < o->width)
                o->waits[e->member * o->width + at] = events[i - 1].waited;
        }
    }
    if (rc == 0 && (out = PyList_New(n_keys)) == NULL)
        rc = -1;
    for (Py_ssize_t k = 0; rc == 0 && k < n_keys; k++) {
        PyObject *waits = array_q(shapes[k].waits, shapes[k].width * shapes[k].members);
        if (waits == NULL)
            rc = -1;
        else
            PyList_SET_ITEM(out, k, waits);
    }
    if (rc == -1 && !PyErr_Occurred())
        PyErr_NoMemory();
    for (Py_ssize_t k = 0; shapes != NULL && k < n_keys; k++)
        PyMem_Free(shapes[k].waits);
    PyMem_Free(events), PyMem_Free(shapes);
    if (rc != 0)
        Py_CLEAR(out);
    if (rc == PAST_64_BITS)
        Py_RETURN_NONE;
    return out;
}

/* owed: None or (base, width, waits) of one group (straggler.Owed) for m members, loaded: 0, PAST_64_BITS or -1 */
static int load_owed(PyObject *owed, Py_ssize_t m, const char *who, Owed *o) {
    o->waits = NULL;
    if (owed == Py_None)
        return 0;
    Py_ssize_t n = 0;
    int overflow = 0;
    if (!PyTuple_Check(owed) || PyTuple_GET_SIZE(owed) != 3) {
        PyErr_Format(PyExc_TypeError, "%s: what the members owe is not (base, width, waits)", who);
        return -1;
    }
    o->base = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(owed, 0), &overflow);
    if (overflow)
        return PAST_64_BITS;
    o->width = PyLong_AsSsize_t(PyTuple_GET_ITEM(owed, 1)), o->members = m;
    if (PyErr_Occurred())
        return -1;
    int rc = load(PyTuple_GET_ITEM(owed, 2), &o->waits, &n);
    if (rc == 0 && (o->width < 0 || n != o->width * m)) {
        PyErr_Format(PyExc_ValueError, "%s: not one owed wait per member and seq of the window", who);
        rc = -1;
    }
    if (rc != 0)
        PyMem_Free(o->waits), o->waits = NULL;
    return rc;
}

/* what member i owes at seq first + j, 0 outside the window (or without an Owed) */
static int64_t owed_at(const Owed *o, Py_ssize_t i, int64_t first, Py_ssize_t j) {
    int64_t at;
    if (o->waits == NULL || __builtin_sub_overflow(first, o->base, &at) || __builtin_add_overflow(at, (int64_t)j, &at) ||
        at < 0 || at >= o->width)
        return 0;
    return o->waits[i * o->width + at];
}

/* how often each member arrived last over the usable seqs (by duration where every usable one has one; among
 * equal arrivals the lowest rank), less what it owes at each: 0, PAST_64_BITS or -1 */
static int count_last(const int64_t *const *issued, const int64_t *const *durations, const char *usable,
                      Py_ssize_t n, Py_ssize_t m, const Owed *owed, int64_t first, const int64_t *ranks,
                      Py_ssize_t *counts, int *by_duration, int64_t *arrival) {
    *by_duration = 1;
    for (Py_ssize_t j = 0; j < n; j++)
        for (Py_ssize_t i = 0; usable[j] && i < m; i++)
            *by_duration &= durations[i][j] >= 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (!usable[j])
            continue;
        for (Py_ssize_t i = 0; i < m; i++) {
            int64_t a = issued[i][j];
            if ((*by_duration && __builtin_mul_overflow(durations[i][j], (int64_t)-1000, &a)) ||
                __builtin_sub_overflow(a, owed_at(owed, i, first, j), &a))
                return PAST_64_BITS;
            arrival[i] = a;
        }
        Py_ssize_t last = 0; /* the latest arrival; among equals, the lowest rank */
        for (Py_ssize_t i = 1; i < m; i++)
            if (arrival[i] > arrival[last] || (arrival[i] == arrival[last] && ranks[i] < ranks[last]))
                last = i;
        counts[last]++;
    }
    return 0;
}

static PyObject *counts_list(const Py_ssize_t *counts, Py_ssize_t m) {
    PyObject *list = PyList_New(m);
    for (Py_ssize_t i = 0; list != NULL && i < m; i++) {
        PyObject *c = PyLong_FromSsize_t(counts[i]);
        if (c == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, c);
    }
    return list;
}

static PyObject *last_counts(PyObject *self, PyObject *args) {
    PyObject *issued_list, *duration_list, *owed, *members_list;
    const char *usable;
    Py_ssize_t n_usable;
    long long first;
    if (!PyArg_ParseTuple(args, "O!O!y#OLO!", &PyList_Type, &issued_list, &PyList_Type, &duration_list, &usable,
                          &n_usable, &owed, &first, &PyList_Type, &members_list))
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(members_list), n = 0, n2 = 0;
    if (m == 0 || PyList_GET_SIZE(issued_list) != m || PyList_GET_SIZE(duration_list) != m) {
        PyErr_SetString(PyExc_ValueError, "last_counts: not one column and rank per member");
        return NULL;
    }
    Owed o;
    int rc = load_owed(owed, m, "last_counts", &o);
    if (rc != 0)
        return rc == PAST_64_BITS ? Py_NewRef(Py_None) : NULL;
    int64_t **issued = PyMem_Calloc((size_t)m, sizeof *issued), **durations = PyMem_Calloc((size_t)m, sizeof *durations);
    int64_t *ranks = NULL, *arrival = PyMem_Malloc((size_t)m * 8);
    Py_ssize_t *counts = PyMem_Calloc((size_t)m, sizeof *counts);
    int by_duration = 1;
    rc = issued == NULL || durations == NULL || arrival == NULL || counts == NULL ? (PyErr_NoMemory(), -1)
                                                                                 : load_all(issued_list, issued, m, &n);
    if (rc == 0)
        rc = load_all(duration_list, durations, m, &n2);
    if (rc == 0)
        rc = load(members_list, &ranks, &n2);
    if (rc == 0 && n_usable != n) {
        PyErr_SetString(PyExc_ValueError, "last_counts: usable flags not one per seq");
        rc = -1;
    }
    if (rc == 0)
        rc = count_last((const int64_t *const *)issued, (const int64_t *const *)durations, usable, n, m, &o,
                        (int64_t)first, ranks, counts, &by_duration, arrival);
    PyObject *out = NULL;
    if (rc == 0) {
        PyObject *list = counts_list(counts, m);
        out = list == NULL ? NULL : Py_BuildValue("(NN)", PyBool_FromLong(by_duration), list);
    }
    free_all(issued, m), free_all(durations, m);
    PyMem_Free(ranks), PyMem_Free(arrival), PyMem_Free(counts), PyMem_Free(o.waits);
    if (rc == PAST_64_BITS)
        Py_RETURN_NONE;
    return out;
}

/* One member's group columns (rank_trace.GroupTrace), read in place: seq, created_ns, duration_us as int64,
 * flags as bytes. ODD where a column is not of those types or their lengths differ. */
#define ODD 2
typedef struct {
    Py_buffer col[4]; /* seq, created_ns, duration_us, flags */
    int held;
    Py_ssize_t len;
} Columns;

static PyObject *column_names[4]; /* seq, created_ns, duration_us, flags: interned at import */

static void release_columns(Columns *c, Py_ssize_t m) {
    for (Py_ssize_t i = 0; c != NULL && i < m; i++)
        release_views(c[i].col, &c[i].held);
}

/* 0, ODD, or -1 with an exception; c->held says how many views to release either way. */
static int get_columns(PyObject *g, PyObject *group_type, Columns *c) {
    int rc = group_columns(g, group_type, 4, column_names, "qqqB", c->col, &c->held, &c->len);
    return rc == COLUMNS_ODD ? ODD : rc;
}

#define COL(c, k) ((const int64_t *)(c).col[k].buf)
#define FLAGS(c) ((const unsigned char *)(c).col[3].buf)

/* every member's columns, or ODD / -1 (all released then) */
static Columns *all_columns(PyObject *groups, PyObject *group_type, Py_ssize_t m, int *rc) {
    Columns *c = PyMem_Calloc((size_t)m, sizeof *c);
    *rc = c == NULL ? (PyErr_NoMemory(), -1) : 0;
    for (Py_ssize_t i = 0; *rc == 0 && i < m; i++)
        if ((*rc = get_columns(PyList_GET_ITEM(groups, i), group_type, &c[i])) == 0 && c[i].len == 0)
            *rc = ODD;
    if (*rc != 0) {
        release_columns(c, m);
        PyMem_Free(c);
        return NULL;
    }
    return c;
}

/* find_stragglers' counts over seqs first..first+n-1, read from each member's columns in place: (samples,
 * by duration, times each member arrived last), or None where a member's seqs are not contiguous over them
 * or a value is past 64 bits (straggler.py then does it with slices) */
static PyObject *counts_of(PyObject *self, PyObject *args) {
    PyObject *groups, *owed, *members_list, *group_type;
    long long first_ll;
    Py_ssize_t n;
    int finished;
    if (!PyArg_ParseTuple(args, "O!LnOO!iO", &PyList_Type, &groups, &first_ll, &n, &owed, &PyList_Type, &members_list,
                          &finished, &group_type))
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(groups), n_ranks = 0;
    int64_t first = (int64_t)first_ll;
    if (m == 0 || PyList_GET_SIZE(members_list) != m || n < 0) {
        PyErr_SetString(PyExc_ValueError, "counts_of: not one group's columns and rank per member");
        return NULL;
    }
    Owed o;
    int rc = load_owed(owed, m, "counts_of", &o);
    if (rc != 0)
        return rc == PAST_64_BITS ? Py_NewRef(Py_None) : NULL;
    Columns *c = all_columns(groups, group_type, m, &rc);
    const int64_t **issued = PyMem_Calloc((size_t)m, sizeof *issued), **durations = PyMem_Calloc((size_t)m, sizeof *durations);
    int64_t *ranks = NULL, *arrival = PyMem_Malloc((size_t)m * 8);
    Py_ssize_t *counts = PyMem_Calloc((size_t)m, sizeof *counts), samples = 0;
    char *usable = PyMem_Malloc((size_t)n + 1);
    if (rc == 0 && (issued == NULL || durations == NULL || arrival == NULL || counts == NULL || usable == NULL))
        rc = (PyErr_NoMemory(), -1);
    if (rc == 0)
        rc = load(members_list, &ranks, &n_ranks);
    if (usable != NULL)
        memset(usable, 1, (size_t)n + 1);
    for (Py_ssize_t i = 0; rc == 0 && i < m; i++) {
        const int64_t *seq = COL(c[i], 0);
        int64_t i0, span;
        /* contiguous (seq[k] = seq[0] + k), and first..first+n-1 within */
        if (__builtin_sub_overflow(seq[c[i].len - 1], seq[0], &span) || span != c[i].len - 1 ||
            __builtin_sub_overflow(first, seq[0], &i0) || i0 < 0 || i0 > c[i].len - n) {
            rc = ODD;
            break;
        }
        issued[i] = COL(c[i], 1) + i0, durations[i] = COL(c[i], 2) + i0;
        const unsigned char *flags = FLAGS(c[i]) + i0;
        for (Py_ssize_t j = 0; j < n; j++)
            usable[j] &= (flags[j] & finished) && issued[i][j] != 0;
    }
    for (Py_ssize_t j = 0; rc == 0 && j < n; j++)
        samples += usable[j] != 0;
    int by_duration = 1;
    if (rc == 0)
        rc = count_last(issued, durations, usable, n, m, &o, first, ranks, counts, &by_duration, arrival);
    PyObject *out = NULL;
    if (rc == 0) {
        PyObject *list = counts_list(counts, m);
        out = list == NULL ? NULL : Py_BuildValue("(nNN)", samples, PyBool_FromLong(by_duration), list);
    }
    release_columns(c, m);
    PyMem_Free(c), PyMem_Free(issued), PyMem_Free(durations), PyMem_Free(ranks), PyMem_Free(arrival);
    PyMem_Free(counts), PyMem_Free(usable), PyMem_Free(o.waits);
    if (rc == ODD || rc == PAST_64_BITS)
        Py_RETURN_NONE;
    return out;
}

/* inherited_waits' chunks of one group: each member's (seqs, issued, waited) over the seqs
 * min(last seq) - recent .. min(last seq) that it finished with an enqueue time, the wait at the seqs every
 * member did, else 0; or None where a member's seqs there repeat or go back, or a value is past 64 bits
 * (straggler.py then does it in Python) */
static PyObject *chunks_of(PyObject *self, PyObject *args) {
    PyObject *groups, *group_type;
    Py_ssize_t recent;
    int finished;
    if (!PyArg_ParseTuple(args, "O!niO", &PyList_Type, &groups, &recent, &finished, &group_type))
        return NULL;
    Py_ssize_t m = PyList_GET_SIZE(groups);
    if (m == 0 || recent < 0) {
        PyErr_SetString(PyExc_ValueError, "chunks_of: no members, or a negative window");
        return NULL;
    }
    int rc;
    Columns *c = all_columns(groups, group_type, m, &rc);
    Py_ssize_t *from = PyMem_Calloc((size_t)m, sizeof *from), *to = PyMem_Calloc((size_t)m, sizeof *to);
    Py_ssize_t width = recent + 1, *have = PyMem_Calloc((size_t)width, sizeof *have);
    int64_t *shortest = PyMem_Malloc((size_t)width * 8), *last = PyMem_Malloc((size_t)width * 8);
    if (rc == 0 && (from == NULL || to == NULL || have == NULL || shortest == NULL || last == NULL))
        rc = (PyErr_NoMemory(), -1);
    int64_t hi = INT64_MAX, lo = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < m; i++)
        hi = COL(c[i], 0)[c[i].len - 1] < hi ? COL(c[i], 0)[c[i].len - 1] : hi;
    if (rc == 0 && __builtin_sub_overflow(hi, (int64_t)recent, &lo))
        rc = PAST_64_BITS;
    for (Py_ssize_t k = 0; rc == 0 && k < width; k++)
        shortest[k] = INT64_MAX, last[k] = INT64_MIN;
    /* the seqs each member finished with an enqueue time, once each, in order; per seq, how many members did,
     * the shortest duration and the latest issue among them */
    for (Py_ssize_t i = 0; rc == 0 && i < m; i++) {
        const int64_t *seq = COL(c[i], 0), *issued = COL(c[i], 1), *duration = COL(c[i], 2);
        const unsigned char *flags = FLAGS(c[i]);
        from[i] = bisect_left_q(seq, c[i].len, lo), to[i] = bisect_right_q(seq, c[i].len, hi);
        for (Py_ssize_t k = from[i]; rc == 0 && k < to[i]; k++) {
            if ((k > from[i] && seq[k] <= seq[k - 1]) || seq[k] < lo || seq[k] > hi)
                rc = ODD; /* (out of lo..hi inside the cut: a column out of order, which bisection cannot cut) */
            else if (issued[k] && (flags[k] & finished)) {
                Py_ssize_t at = (Py_ssize_t)(seq[k] - lo);
                have[at]++;
                shortest[at] = duration[k] < shortest[at] ? duration[k] : shortest[at];
                last[at] = issued[k] > last[at] ? issued[k] : last[at];
            }
        }
    }
    PyObject *out = rc == 0 ? PyList_New(m) : NULL;
    if (rc == 0 && out == NULL)
        rc = -1;
    for (Py_ssize_t i = 0; rc == 0 && i < m; i++) {
        const int64_t *seq = COL(c[i], 0), *issued = COL(c[i], 1), *duration = COL(c[i], 2);
        const unsigned char *flags = FLAGS(c[i]);
        Py_ssize_t kept = 0, span = to[i] - from[i];
        int64_t *cols = PyMem_Malloc((size_t)(3 * span + 1) * 8);
        if (cols == NULL) {
            rc = (PyErr_NoMemory(), -1);
            break;
        }
        int64_t *seqs = cols, *issue = cols + span, *waited = cols + 2 * span;
        for (Py_ssize_t k = from[i]; rc == 0 && k < to[i]; k++) {
            if (!issued[k] || !(flags[k] & finished))
                continue;
            Py_ssize_t at = (Py_ssize_t)(seq[k] - lo);
            int64_t wait = 0;
            if (have[at] == m && (shortest[at] >= 0 ? __builtin_mul_overflow(duration[k] - shortest[at], (int64_t)1000, &wait)
                                                    : __builtin_sub_overflow(last[at], issued[k], &wait)))
                rc = PAST_64_BITS;
            seqs[kept] = seq[k], issue[kept] = issued[k], waited[kept] = wait, kept++;
        }
        PyObject *triple = rc == 0 ? Py_BuildValue("(NNN)", array_q(seqs, kept), array_q(issue, kept),
                                                   array_q(waited, kept)) : NULL;
        PyMem_Free(cols);
        if (rc == 0 && triple == NULL)
            rc = -1;
        if (triple != NULL)
            PyList_SET_ITEM(out, i, triple);
    }
    release_columns(c, m);
    PyMem_Free(c), PyMem_Free(from), PyMem_Free(to), PyMem_Free(have), PyMem_Free(shortest), PyMem_Free(last);
    if (rc != 0)
        Py_CLEAR(out);
    if (rc == ODD || rc == PAST_64_BITS)
        Py_RETURN_NONE;
    return out;
}

/* present(ranks, cols, GroupTrace): every member's group columns, in the members' order, and the highest first
 * and lowest last seq among them: ([GroupTrace], lo, hi); None where a member has no columns or no rows (a group
 * judged only where every member recorded it); NotImplemented where a column is not of its kind (straggler.py's
 * Python then reads them). A job-level view asks it of every group twice a pass: ~6000 groups, ~65000 members
 * at 16384 ranks, each read in three Python loops before. */
static PyObject *present(PyObject *self, PyObject *args) {
    PyObject *ranks, *cols, *group_type;
    if (!PyArg_ParseTuple(args, "OO!O", &ranks, &PyDict_Type, &cols, &group_type))
        return NULL;
    if (!PyTuple_CheckExact(ranks) && !PyList_CheckExact(ranks))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(ranks);
    if (m < 2)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(m);
    if (out == NULL)
        return NULL;
    int64_t lo = INT64_MIN, hi = INT64_MAX;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < m; i++) {
        PyObject *g = PyDict_GetItemWithError(cols, PySequence_Fast_GET_ITEM(ranks, i));
        if (g == NULL) {
            rc = PyErr_Occurred() ? -1 : 1;
            break;
        }
        Py_buffer seq;
        int held;
        Py_ssize_t len = 0;
        rc = group_columns(g, group_type, 1, column_names, "q", &seq, &held, &len);
        if (rc == 0 && len == 0)
            rc = 1;
        else if (rc == 0) {
            const int64_t *v = seq.buf;
            lo = v[0] > lo ? v[0] : lo, hi = v[len - 1] < hi ? v[len - 1] : hi;
            PyList_SET_ITEM(out, i, Py_NewRef(g));
        } else if (rc == COLUMNS_ODD)
            rc = 2;
        release_views(&seq, &held);
    }
    if (rc != 0) {
        Py_DECREF(out);
        if (rc == 1)
            Py_RETURN_NONE;
        if (rc == 2)
            Py_RETURN_NOTIMPLEMENTED;
        return NULL;
    }
    return Py_BuildValue("(NLL)", out, (long long)lo, (long long)hi);
}

static PyMethodDef methods[] = {
    {"waits_in_step", waits_in_step, METH_VARARGS,
     "waits_in_step(issued columns, duration columns) -> each member's waits, or None past 64 bits"},
    {"timeline", timeline, METH_VARARGS,
     "timeline({rank: [(key index, member index, seqs, issued, waited)]}, [(base, width, members)] per key) -> "
     "per key, array('q') of the owed waits (straggler.Owed), or None"},
    {"last_counts", last_counts, METH_VARARGS,
     "last_counts(issued columns, duration columns, usable, Owed or None, first seq, ranks) -> "
     "(by duration, times each member arrived last), or None"},
    {"counts_of", counts_of, METH_VARARGS,
     "counts_of(members' group columns, first seq, n, Owed or None, ranks, finished flag, GroupTrace) -> "
     "(samples, by duration, times each member arrived last), or None"},
    {"present", present, METH_VARARGS,
     "present(ranks, {rank: GroupTrace}, GroupTrace) -> (each member's GroupTrace, highest first seq, lowest last "
     "seq), None where one lacks rows, or NotImplemented"},
    {"chunks_of", chunks_of, METH_VARARGS,
     "chunks_of(members' group columns, recent, finished flag, GroupTrace) -> each member's (seqs, issued, "
     "waited), or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_straggler", NULL, -1, methods};

PyMODINIT_FUNC PyInit__straggler(void) {
    const char *names[4] = {"seq", "created_ns", "duration_us", "flags"};
    for (int k = 0; k < 4; k++)
        if ((column_names[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return NULL;
    return PyModule_Create(&module);
}
