/* The compiled helper of rank_trace.append_entries: a followed trace's new entries appended to its
 * group columns without a Python step per entry (optional: without a compiler rank_trace does it all).
 *
 * append(entries, start, first_row, tables) takes entries from `start` on, in order, while each is an
 * entry append_rows handles the usual way: its group exists with a column of positions, its (state,
 * retired, backend) already has flags, it is no coalesced op's merge into the position before, its values
 * fit their columns (a p2p coalesced group's end marker becomes its mark only, as there). It returns the index of the first entry it did not take (the
 * caller hands that one to append_rows, then calls again), having appended the ones before it exactly
 * as append_rows would: the same columns, p2p ops, interned signatures and call sites, heads and marks.
 * Two passes: each taken entry's values into C buffers (interning as it goes, in entry order, as
 * append_rows does), then each group's columns extended once per column (array.frombytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../_group_columns.h"

/* Entry's field positions, the types and constants of rank_trace (setup()) */
enum { F_PG_NAME, F_IS_P2P, F_OP, F_SEQ, F_P2P_SEQ, F_BACKEND, F_SRC, F_DST, F_CREATED, F_DURATION, F_IN_SIZES,
       F_OUT_SIZES, F_IN_DTYPES, F_OUT_DTYPES, F_CALL_SITE, F_STATE, F_RETIRED, F_STARTED, N_FIELDS };
static Py_ssize_t field[N_FIELDS], max_field;
static PyObject *op_signature, *p2p_op, *new_tuple, *coalesced;
static int untracked(PyObject *o, int depth);
static long STARTED, FINISHED, ISSUED, P2P, COLUMN, SKIPPED;
static PyObject *s_pg_desc, *s_pg_id, *s_groups, *s_seq, *s_sig, *s_flags, *s_created_ns, *s_duration_us, *s_site, *s_p2p, *s_frombytes, *s_extend;
static int ready;

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *fields;
    PyObject *sig_type, *p2p_type, *new;
    if (!PyArg_ParseTuple(args, "O!OOOllllll", &PyTuple_Type, &fields, &sig_type, &p2p_type, &new, &STARTED,
                          &FINISHED, &ISSUED, &P2P, &COLUMN, &SKIPPED))
        return NULL;
    if (PyTuple_GET_SIZE(fields) != N_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "setup: wrong number of entry fields");
        return NULL;
    }
    max_field = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        if ((field[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(fields, i))) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "setup: negative field");
            return NULL;
        }
        max_field = field[i] > max_field ? field[i] : max_field;
    }
    Py_INCREF(sig_type), Py_INCREF(p2p_type), Py_INCREF(new);
    Py_XSETREF(op_signature, sig_type);
    Py_XSETREF(p2p_op, p2p_type);
    Py_XSETREF(new_tuple, new);
    ready = 1;
    Py_RETURN_NONE;
}

#define MAX_GROUPS 64 /* groups touched in one call; an entry of another one ends the call */

typedef struct {
    PyObject *g, *head; /* borrowed: alive in the caller's dicts throughout */
    int64_t last_seq;
    int has_last;
    Py_ssize_t n; /* positions taken */
} Group;

typedef struct { /* one taken entry */
    int group, kind, site_flag;
    int64_t seq, created, duration_us, row;
    int32_t sig, site;
    uint8_t flags;
    PyObject *p2p; /* new reference, P2P only */
} Row;

static int fits_int64(PyObject *v, int64_t *out) {
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

/* -1: an error (raised), else the index the table gives `key`, `fresh` appended to `table` if it had none */
static Py_ssize_t intern(PyObject *index, PyObject *table, PyObject *key) {
    PyObject *got = PyDict_GetItemWithError(index, key);
    if (got != NULL)
        return PyLong_AsSsize_t(got);
    if (PyErr_Occurred())
        return -1;
    Py_ssize_t i = PyList_GET_SIZE(table);
    PyObject *num = PyLong_FromSsize_t(i);
    if (num == NULL || PyDict_SetItem(index, key, num) < 0 || PyList_Append(table, key) < 0) {
        Py_XDECREF(num);
        return -1;
    }
    Py_DECREF(num);
    return i;
}

static Py_ssize_t signature(PyObject *sigs, PyObject *sig_index, PyObject *signatures, PyObject *e, PyObject *op) {
    PyObject *key = Py_BuildValue("(Onnnn)", op, (Py_ssize_t)PyTuple_GET_ITEM(e, field[F_IN_SIZES]),
                                  (Py_ssize_t)PyTuple_GET_ITEM(e, field[F_OUT_SIZES]),
                                  (Py_ssize_t)PyTuple_GET_ITEM(e, field[F_IN_DTYPES]),
                                  (Py_ssize_t)PyTuple_GET_ITEM(e, field[F_OUT_DTYPES]));
    if (key == NULL)
        return -1;
    PyObject *got = PyDict_GetItemWithError(sigs, key);
    if (got != NULL) {
        Py_DECREF(key);
        return PyLong_AsSsize_t(got);
    }
    Py_ssize_t i = -1;
    PyObject *one = NULL, *sig = NULL, *num = NULL;
    if (!PyErr_Occurred()
        && (one = PyObject_CallFunctionObjArgs(op_signature, op, PyTuple_GET_ITEM(e, field[F_IN_SIZES]),
                                               PyTuple_GET_ITEM(e, field[F_OUT_SIZES]),
                                               PyTuple_GET_ITEM(e, field[F_IN_DTYPES]),
                                               PyTuple_GET_ITEM(e, field[F_OUT_DTYPES]), NULL)) != NULL
        && (sig = PyTuple_Pack(1, one)) != NULL && (i = intern(sig_index, signatures, sig)) >= 0
        && ((num = PyLong_FromSsize_t(i)) == NULL || PyDict_SetItem(sigs, key, num) < 0))
        i = -1;
    Py_XDECREF(num), Py_XDECREF(sig), Py_XDECREF(one), Py_DECREF(key);
    return i;
}

static int call_method(PyObject *obj, PyObject *name, PyObject *arg) {
    PyObject *r = PyObject_CallMethodOneArg(obj, name, arg);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* array.frombytes of `n` items of `size` bytes, read from rows[] at `offset`, of group `gi` */
static int extend(PyObject *arr, Row *rows, Py_ssize_t n_rows, int gi, Py_ssize_t n, size_t offset, size_t size) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)size);
    if (b == NULL)
        return -1;
    char *p = PyBytes_AS_STRING(b);
    for (Py_ssize_t r = 0; r < n_rows; r++)
        if (rows[r].group == gi && rows[r].kind == COLUMN) {
            memcpy(p, (char *)&rows[r] + offset, size);
            p += size;
        }
    int rc = call_method(arr, s_frombytes, b);
    Py_DECREF(b);
    return rc;
}

static PyObject *append(PyObject *self, PyObject *args) {
    PyObject *entries, *groups, *known_flags, *site_index, *call_sites, *sig_index, *signatures, *sigs, *heads,
        *names, *kinds, *site_marks;
    Py_ssize_t start, first_row;
    if (!PyArg_ParseTuple(args, "O!nnO!O!O!O!O!O!O!O!O!O!O!", &PyTuple_Type, &entries, &start, &first_row,
                          &PyDict_Type, &groups, &PyDict_Type, &known_flags, &PyDict_Type, &site_index,
                          &PyList_Type, &call_sites, &PyDict_Type, &sig_index, &PyList_Type, &signatures,
                          &PyDict_Type, &sigs, &PyDict_Type, &heads, &PyList_Type, &names, &PyByteArray_Type,
                          &kinds, &PyByteArray_Type, &site_marks))
        return NULL;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "setup() was not called");
        return NULL;
    }
    Py_ssize_t n_entries = PyTuple_GET_SIZE(entries), end = start;
    if (start < 0 || start > n_entries) {
        PyErr_SetString(PyExc_IndexError, "start out of range");
        return NULL;
    }
    Row *rows = PyMem_Calloc(n_entries - start + 1, sizeof(Row));
    Group grp[MAX_GROUPS];
    int n_groups = 0;
    if (rows == NULL)
        return PyErr_NoMemory();
    Py_ssize_t n = 0, last_sig = -1;
    long last_flags = -1;
    PyObject *last_fk[3], *last_sk[5]; /* borrowed from entries, alive throughout */
    for (; end < n_entries; end++) { /* pass 1: what each entry becomes, or the end of what is taken */
        PyObject *e = PyTuple_GET_ITEM(entries, end);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) <= max_field)
            break;
#define F(name) PyTuple_GET_ITEM(e, field[name])
        PyObject *pg_name = F(F_PG_NAME), *op = F(F_OP);
        int is_p2p = PyObject_IsTrue(F(F_IS_P2P));
        if (is_p2p < 0)
            break;
        if (is_p2p && !PyUnicode_CheckExact(op))
            break; /* an op that is no plain string: append_rows compares it */
        if (is_p2p && PyUnicode_Compare(op, coalesced) == 0) {
            /* the end marker of a p2p coalesced group (its members are recorded one by one): a mark only */
            rows[n] = (Row){.group = -1, .kind = SKIPPED, .row = first_row + end, .site = -1};
            n++;
            continue;
        }
        PyObject *g = PyDict_GetItemWithError(groups, pg_name);
        if (g == NULL)
            break; /* a new group (or an unhashable name: append_rows says so) */
        int gi = 0;
        while (gi < n_groups && grp[gi].g != g)
            gi++;
        if (gi == n_groups) {
            if (n_groups == MAX_GROUPS)
                break;
            grp[gi] = (Group){g, NULL, 0, 0, 0};
            n_groups++;
        }
        /* an entry's flags and signature are mostly its predecessor's: the same objects, no key to build */
        PyObject *fk[3] = {F(F_STATE), F(F_RETIRED), F(F_BACKEND)};
        long flags = last_flags;
        if (flags < 0 || memcmp(fk, last_fk, sizeof fk) != 0) {
            PyObject *fkey = PyTuple_Pack(3, fk[0], fk[1], fk[2]);
            PyObject *fv = fkey ? PyDict_GetItemWithError(known_flags, fkey) : NULL;
            Py_XDECREF(fkey);
            if (fv == NULL || (flags = PyLong_AsLong(fv)) < 0 || flags > 255)
                break;
            memcpy(last_fk, fk, sizeof fk);
            last_flags = flags;
        }
        int started = PyObject_IsTrue(F(F_STARTED));
        if (started < 0)
            break;
        if (started)
            flags |= STARTED;
        Row *r = &rows[n];
        r->group = gi, r->row = first_row + end, r->flags = (uint8_t)flags, r->site = -1;
        PyObject *call_site = F(F_CALL_SITE);
        if (call_site != Py_None) {
            Py_ssize_t s = intern(site_index, call_sites, call_site);
            if (s < 0 || s > INT32_MAX)
                break;
            r->site = (int32_t)s;
        }
        r->site_flag = r->site >= 0;
        PyObject *sk[5] = {op, F(F_IN_SIZES), F(F_OUT_SIZES), F(F_IN_DTYPES), F(F_OUT_DTYPES)};
        Py_ssize_t sig = last_sig;
        if (sig < 0 || memcmp(sk, last_sk, sizeof sk) != 0) {
            sig = signature(sigs, sig_index, signatures, e, op);
            if (sig < 0 || sig > INT32_MAX)
                break;
            memcpy(last_sk, sk, sizeof sk);
            last_sig = sig;
        }
        r->sig = (int32_t)sig;
        if (is_p2p) {
            long f = flags & ISSUED ? flags | FINISHED : flags; /* rank_trace.p2p_flags */
            PyObject *items = Py_BuildValue("(OOOOnlOn)", F(F_P2P_SEQ), op, F(F_SRC), F(F_DST), sig, f, F(F_CREATED),
                                            (Py_ssize_t)r->site);
            r->p2p = items ? PyObject_CallFunctionObjArgs(new_tuple, p2p_op, items, NULL) : NULL;
            Py_XDECREF(items);
            if (r->p2p == NULL)
                break;
            untracked(r->p2p, 0);  /* (plain values: kept for the window, never walked by the young collection) */
            r->kind = P2P;
            n++;
            continue;
        }
        PyObject *dur = F(F_DURATION);
        if (!fits_int64(F(F_SEQ), &r->seq) || !fits_int64(F(F_CREATED), &r->created))
            break;
        if (dur == Py_None)
            r->duration_us = -1;
        else {
            if (!PyFloat_CheckExact(dur))
                break;
            double us = PyFloat_AS_DOUBLE(dur) * 1000; /* int(duration * 1000): truncated toward zero */
            if (!isfinite(us) || us >= 9223372036854775807.0 || us <= -9223372036854775808.0)
                break;
            r->duration_us = (int64_t)us;
        }
        Group *G = &grp[gi];
        if (!G->has_last) {
            PyObject *col = PyObject_GetAttr(g, s_seq);
            Py_ssize_t len = col ? PyObject_Length(col) : -1;
            PyObject *last = len > 0 ? PySequence_GetItem(col, len - 1) : NULL;
            Py_XDECREF(col);
            if (len < 0 || (len > 0 && (last == NULL || !fits_int64(last, &G->last_seq)))) {
                Py_XDECREF(last);
                break;
            }
            Py_XDECREF(last);
            G->has_last = len > 0;
        }
        if (G->has_last && G->last_seq == r->seq)
            break; /* another op of a coalesced group: merged into the position before */
        if (G->head == NULL && (G->head = PyDict_GetItemWithError(heads, pg_name)) == NULL)
            break; /* the group's first position */
        G->last_seq = r->seq, G->has_last = 1, G->n++;
        r->kind = COLUMN;
        n++;
#undef F
    }
    if (PyErr_Occurred())
        PyErr_Clear(); /* append_rows meets the entry again and says what is wrong with it */
    if (n == 0) { /* (the first entry of a group or of an outcome: nothing to extend) */
        PyMem_Free(rows);
        return PyLong_FromSsize_t(start);
    }
    /* pass 2: the columns, p2p ops and marks of what was taken */
    PyObject *kind_bytes = PyBytes_FromStringAndSize(NULL, n), *site_bytes = PyBytes_FromStringAndSize(NULL, n);
    int rc = kind_bytes && site_bytes ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        Row *r = &rows[i];
        PyBytes_AS_STRING(kind_bytes)[i] = (char)r->kind;
        PyBytes_AS_STRING(site_bytes)[i] = (char)r->site_flag;
        rc = PyList_Append(names, PyTuple_GET_ITEM(PyTuple_GET_ITEM(entries, start + i), field[F_PG_NAME]));
        if (rc == 0 && r->kind == P2P) {
            PyObject *ops = PyObject_GetAttr(grp[r->group].g, s_p2p);
            rc = ops != NULL && PyList_Check(ops) ? PyList_Append(ops, r->p2p) : -1;
            if (rc < 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a group's p2p ops are not a list");
            Py_XDECREF(ops);
        }
    }
    for (int gi = 0; rc == 0 && gi < n_groups; gi++) {
        if (grp[gi].n == 0)
            continue;
        PyObject *g = grp[gi].g;
        struct { PyObject *name; size_t offset, size; } cols[] = {
            {s_seq, offsetof(Row, seq), 8}, {s_sig, offsetof(Row, sig), 4}, {s_flags, offsetof(Row, flags), 1},
            {s_created_ns, offsetof(Row, created), 8}, {s_duration_us, offsetof(Row, duration_us), 8},
            {s_site, offsetof(Row, site), 4}, {NULL, offsetof(Row, row), 8}};
        for (size_t c = 0; rc == 0 && c < sizeof cols / sizeof cols[0]; c++) {
            PyObject *arr = cols[c].name ? PyObject_GetAttr(g, cols[c].name) : (Py_INCREF(grp[gi].head), grp[gi].head);
            rc = arr == NULL ? -1 : extend(arr, rows, n, gi, grp[gi].n, cols[c].offset, cols[c].size);
            Py_XDECREF(arr);
        }
    }
    if (rc == 0)
        rc = call_method(kinds, s_extend, kind_bytes);
    if (rc == 0)
        rc = call_method(site_marks, s_extend, site_bytes);
    Py_XDECREF(kind_bytes), Py_XDECREF(site_bytes);
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(rows[i].p2p);
    PyMem_Free(rows);
    return rc < 0 ? NULL : PyLong_FromSsize_t(start + n);
}

/* untrack(objects): takes out of the cyclic collector's lists each of these that is a tuple (or a tuple
 * subclass with no fields of its own: a NamedTuple such as Entry) holding no object the collector tracks,
 * its nested tuples first. CPython does this for exact tuples at their first collection; a NamedTuple it
 * never untracks, so every collection walks every field of every Entry the view holds. Untracking can
 * only make the collector more cautious (an untracked object's references keep what they refer to), and
 * a tuple of untracked items is in no cycle but through its own class. */
/* a tuple or a subclass with no fields of its own (a NamedTuple): laid out as a tuple */
static int plain_tuple_type(PyTypeObject *t) {
    return PyType_IsSubtype(t, &PyTuple_Type) && t->tp_basicsize == PyTuple_Type.tp_basicsize &&
           t->tp_itemsize == PyTuple_Type.tp_itemsize && t->tp_dictoffset == 0;
}

static int plain_tuple(PyObject *o) {
    return PyTuple_Check(o) && plain_tuple_type(Py_TYPE(o));
}

static int untracked(PyObject *o, int depth) {
    if (!PyObject_IS_GC(o) || !PyObject_GC_IsTracked(o))
        return 1;
    if (depth > 8 || !plain_tuple(o))
        return 0;
    int all = 1;
    for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(o); i < n; i++)
        all &= untracked(PyTuple_GET_ITEM(o, i), depth + 1);
    if (all)
        PyObject_GC_UnTrack(o);
    return all;
}

static PyObject *untrack(PyObject *self, PyObject *objects) {
    if (!PyTuple_CheckExact(objects) && !PyList_CheckExact(objects)) {
        PyErr_SetString(PyExc_TypeError, "untrack: a tuple or a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(objects); i++)
        untracked(PySequence_Fast_ITEMS(objects)[i], 0);
    Py_RETURN_NONE;
}

/* entries(entry_type, columns, fields): a tuple of entry_type (a plain tuple subclass: plain_tuple's rule) rows, row i
 * holding item i of each column, each out of the collector's lists where untrack would take it, and the tuple
 * too where all its rows are (as untrack takes a tuple of rows). The rows a
 * decoder hands the view as columns (decode/peer_rows.py), made in one step instead of a tuple per row for
 * zip and its copy for the class. NotImplemented where entry_type is no such class, or the columns are not a
 * list of tuples of one length, one per field (`fields`). */
static PyObject *entries_of(PyObject *self, PyObject *args) {
    PyObject *type_obj, *columns;
    Py_ssize_t fields;
    if (!PyArg_ParseTuple(args, "OO!n", &type_obj, &PyList_Type, &columns, &fields))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    Py_ssize_t k = PyList_GET_SIZE(columns);
    if (!PyType_Check(type_obj) || !plain_tuple_type(type) || (k != fields && k != 0))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = k ? -1 : 0;
    for (Py_ssize_t c = 0; c < k; c++) {
        PyObject *col = PyList_GET_ITEM(columns, c);
        if (!PyTuple_CheckExact(col) || (n >= 0 && PyTuple_GET_SIZE(col) != n))
            Py_RETURN_NOTIMPLEMENTED;
        n = PyTuple_GET_SIZE(col);
    }
    PyObject *out = PyTuple_New(n);
    int all = 1;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *e = type->tp_alloc(type, k);
        if (e == NULL) {
            Py_CLEAR(out);
            break;
        }
        for (Py_ssize_t c = 0; c < k; c++) {
            PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(columns, c), i);
            Py_INCREF(v);
            PyTuple_SET_ITEM(e, c, v);
        }
        all &= untracked(e, 0);
        PyTuple_SET_ITEM(out, i, e);
    }
    if (out != NULL && all)
        PyObject_GC_UnTrack(out);
    return out;
}

/* entries_from(entry_type, templates, kind_of, numbers, slots): a tuple of entry_type rows (entries' rule), row i
 * being templates[kind_of[i]] with item i of numbers[j] at position slots[j]. A peer's rows sent as kinds
 * (decode/peer_rows.py): each distinct kind's fields once, each row its kind and its numbers, so the decoders
 * pickle a rank's ~20 new rows as 4 templates and 8 short columns, and the view builds them here, untracked
 * where entries would untrack them. NotImplemented where a template is not a tuple of `fields` items, a column
 * is not a tuple of kind_of's length, a slot is outside the fields, or a kind is not an index of templates. */
static PyObject *entries_from(PyObject *self, PyObject *args) {
    PyObject *type_obj, *templates, *kind_of, *numbers, *slots;
    Py_ssize_t fields;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!n", &type_obj, &PyTuple_Type, &templates, &PyTuple_Type, &kind_of,
                          &PyList_Type, &numbers, &PyTuple_Type, &slots, &fields))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    Py_ssize_t kinds = PyTuple_GET_SIZE(templates), n = PyTuple_GET_SIZE(kind_of);
    Py_ssize_t m = PyList_GET_SIZE(numbers), at[64];
    if (!PyType_Check(type_obj) || !plain_tuple_type(type) || m != PyTuple_GET_SIZE(slots) || m > 64)
        Py_RETURN_NOTIMPLEMENTED;
    for (Py_ssize_t k = 0; k < kinds; k++) {
        PyObject *t = PyTuple_GET_ITEM(templates, k);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != fields)
            Py_RETURN_NOTIMPLEMENTED;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *col = PyList_GET_ITEM(numbers, j), *slot = PyTuple_GET_ITEM(slots, j);
        if (!PyTuple_CheckExact(col) || PyTuple_GET_SIZE(col) != n || !PyLong_CheckExact(slot))
            Py_RETURN_NOTIMPLEMENTED;
        at[j] = PyLong_AsSsize_t(slot);
        if (at[j] < 0 || at[j] >= fields) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {  /* checked first: nothing is built for rows the Python way reads */
        PyObject *k = PyTuple_GET_ITEM(kind_of, i);
        Py_ssize_t v = PyLong_CheckExact(k) ? PyLong_AsSsize_t(k) : -1;
        if (v < 0 || v >= kinds) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    PyObject *out = PyTuple_New(n);
    int all = 1;
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(templates, PyLong_AsSsize_t(PyTuple_GET_ITEM(kind_of, i)));
        PyObject *e = type->tp_alloc(type, fields);
        if (e == NULL) {
            Py_CLEAR(out);
            break;
        }
        for (Py_ssize_t f = 0; f < fields; f++)
            PyTuple_SET_ITEM(e, f, Py_NewRef(PyTuple_GET_ITEM(t, f)));
        for (Py_ssize_t j = 0; j < m; j++)
            Py_SETREF(((PyTupleObject *)e)->ob_item[at[j]], Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(numbers, j), i)));
        all &= untracked(e, 0);
        PyTuple_SET_ITEM(out, i, e);
    }
    if (out != NULL && all)
        PyObject_GC_UnTrack(out);
    return out;
}

/* edge_facts(entries, pg_name_at, created_at, started_at, completed_at, timeout_at, backend_at, state_at,
 * scheduled): rank_trace.EdgeFacts.of's six columns: pg_name, the times and timeout as array('q') (0 where
 * None: read where they lie, the header's sample is contiguous), the backend where the state is not
 * `scheduled`, else None. NotImplemented where an entry is not a tuple holding those fields, a time is
 * neither None nor an int of 64 bits, or a state is no str. */
static PyObject *edge_facts(PyObject *self, PyObject *args) {
    PyObject *entries, *scheduled;
    Py_ssize_t at[7];
    if (!PyArg_ParseTuple(args, "OnnnnnnnU", &entries, &at[0], &at[1], &at[2], &at[3], &at[4], &at[5], &at[6],
                          &scheduled))
        return NULL;
    if (!PyTuple_CheckExact(entries) && !PyList_CheckExact(entries))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(entries), need = 0;
    for (int c = 0; c < 7; c++) {
        if (at[c] < 0)
            Py_RETURN_NOTIMPLEMENTED;
        if (at[c] + 1 > need)
            need = at[c] + 1;
    }
    PyObject **items = PySequence_Fast_ITEMS(entries);
    for (Py_ssize_t i = 0; i < n; i++) {  /* checked first: nothing is built for a dump the Python way reads */
        PyObject *e = items[i];
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < need || !PyUnicode_CheckExact(PyTuple_GET_ITEM(e, at[6])))
            Py_RETURN_NOTIMPLEMENTED;
    }
    int64_t *numbers = PyMem_Malloc((size_t)(4 * n + 1) * 8);
    PyObject *out = PyTuple_New(6);
    if (numbers == NULL || out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++)
        for (int c = 1; c <= 4; c++) {
            PyObject *v = PyTuple_GET_ITEM(items[i], at[c]);
            numbers[(c - 1) * n + i] = 0; /* (`v or 0`) */
            if (v != Py_None && !fits_int64(v, &numbers[(c - 1) * n + i])) {
                PyMem_Free(numbers), Py_DECREF(out);
                Py_RETURN_NOTIMPLEMENTED; /* (an int past 64 bits: the Python way keeps it) */
            }
        }
    for (int c = 0; c < 6; c++) {
        PyObject *col = c >= 1 && c <= 4 ? array_q(numbers + (c - 1) * n, n) : PyList_New(n);
        if (col == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, c, col);
        for (Py_ssize_t i = 0; (c == 0 || c == 5) && i < n; i++) {
            PyObject *v;
            if (c == 0) {
                v = PyTuple_GET_ITEM(items[i], at[0]);
            } else {
                PyObject *state = PyTuple_GET_ITEM(items[i], at[6]);
                v = (state == scheduled || PyUnicode_Compare(state, scheduled) == 0) ? Py_None
                                                                                      : PyTuple_GET_ITEM(items[i], at[5]);
            }
            PyList_SET_ITEM(col, i, Py_NewRef(v));
        }
    }
    PyMem_Free(numbers);
    return out;
fail:
    PyMem_Free(numbers), Py_XDECREF(out);
    return NULL;
}

/* recent_p2p(ops, keep, finished): rank_trace.recent_p2p over a list of P2POp (op, src, dst at 1, 2, 3, flags
 * at 5): every op not `finished` and the last `keep` of each (op, src, dst), in order. NotImplemented where
 * an op is not such a tuple (op a str, src and dst ints or None, flags an int). */
static int plain_peer(PyObject *v) {
    return v == Py_None || PyLong_CheckExact(v);
}

#define MAX_PEERS 32
static int same_peer(PyObject *a, PyObject *b) { /* None or exact ints (plain_peer): as their tuples compare */
    return a == b || (a != Py_None && b != Py_None && PyObject_RichCompareBool(a, b, Py_EQ) == 1);
}

static PyObject *recent_p2p(PyObject *self, PyObject *args) {
    PyObject *ops;
    long keep, finished;
    if (!PyArg_ParseTuple(args, "O!ll", &PyList_Type, &ops, &keep, &finished))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) < 6 || !PyLong_CheckExact(PyTuple_GET_ITEM(op, 5))
            || !PyUnicode_CheckExact(PyTuple_GET_ITEM(op, 1)) || !plain_peer(PyTuple_GET_ITEM(op, 2))
            || !plain_peer(PyTuple_GET_ITEM(op, 3)))
            Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *seen = NULL, *out = PyList_New(0);
    char *kept = PyMem_Calloc(n ? n : 1, 1);
    if (out == NULL || kept == NULL)
        goto fail;
    /* a group's p2p ops go to a few peers: their counts kept in a small table, each op's peer found by pointer
     * or equality (building a key tuple and a dict entry per op was most of this); more peers than that: a dict */
    struct { PyObject *op, *src, *dst; long count; } peer[MAX_PEERS];
    int n_peers = 0;
    for (Py_ssize_t i = n - 1; i >= 0 && n_peers >= 0; i--) {
        PyObject *t = PyList_GET_ITEM(ops, i), *op = PyTuple_GET_ITEM(t, 1), *src = PyTuple_GET_ITEM(t, 2),
                 *dst = PyTuple_GET_ITEM(t, 3);
        int j = 0;
        for (; j < n_peers; j++)
            if (same_peer(peer[j].src, src) && same_peer(peer[j].dst, dst)
                && (peer[j].op == op || PyUnicode_Compare(peer[j].op, op) == 0))
                break;
        if (j == n_peers) {
            if (n_peers == MAX_PEERS) {
                n_peers = -1;  /* (the dict below, from the newest op again) */
                break;
            }
            peer[j].op = op, peer[j].src = src, peer[j].dst = dst, peer[j].count = 0;
            n_peers++;
        }
        long flags = PyLong_AsLong(PyTuple_GET_ITEM(t, 5));
        if (flags == -1 && PyErr_Occurred())
            goto fail;
        kept[i] = peer[j].count < keep || !(flags & finished);
        peer[j].count++;
    }
    if (n_peers < 0 && (seen = PyDict_New()) == NULL)
        goto fail;
    for (Py_ssize_t i = n_peers < 0 ? n - 1 : -1; i >= 0; i--) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        PyObject *key = PyTuple_GetSlice(op, 1, 4);
        if (key == NULL)
            goto fail;
        PyObject *count = PyDict_GetItemWithError(seen, key);  /* (borrowed) */
        if (count == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail;
        }
        long c = count == NULL ? 0 : PyLong_AsLong(count);
        long flags = PyLong_AsLong(PyTuple_GET_ITEM(op, 5));
        if (flags == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail;
        }
        kept[i] = c < keep || !(flags & finished);
        PyObject *next = PyLong_FromLong(c + 1);
        int rc = next == NULL ? -1 : PyDict_SetItem(seen, key, next);
        Py_XDECREF(next);
        Py_DECREF(key);
        if (rc < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (kept[i] && PyList_Append(out, PyList_GET_ITEM(ops, i)) < 0)
            goto fail;
    PyMem_Free(kept);
    Py_XDECREF(seen);
    return out;
fail:
    PyMem_Free(kept);
    Py_XDECREF(seen), Py_XDECREF(out);
    return NULL;
}

/* how many leading items of x[0..na) are the very objects y[k], y[k+1], ... of y[0..nb) */
static Py_ssize_t same_run(PyObject *const *x, Py_ssize_t na, PyObject *const *y, Py_ssize_t nb, Py_ssize_t k) {
    Py_ssize_t i = 0;
    while (i < na && k + i < nb && x[i] == y[k + i])
        i++;
    return i;
}

/* leading_same(new, old, k): how many leading items of `new` are the very objects old[k], old[k+1], ...
 * (tuples or lists; NotImplemented otherwise). Pointers only: no item is touched, where a Python pass
 * increfs each one, a cache miss per entry in a big view (a followed trace asks it of its window). */
static PyObject *leading_same(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "OOn", &a, &b, &k))
        return NULL;
    if ((!PyTuple_CheckExact(a) && !PyList_CheckExact(a)) || (!PyTuple_CheckExact(b) && !PyList_CheckExact(b))
        || k < 0)
        Py_RETURN_NOTIMPLEMENTED;
    return PyLong_FromSsize_t(same_run(PySequence_Fast_ITEMS(a), PySequence_Fast_GET_SIZE(a),
                                       PySequence_Fast_ITEMS(b), PySequence_Fast_GET_SIZE(b), k));
}

/* slide(seqs, k, b, added): each of `seqs` (lists or bytearrays) in place to seq[k:b] + added[i] (added None:
 * seq[k:b]), the window's columns moved along with it (trace_window._follow: EdgeFacts.slide, RowMarks.keep). */
static PyObject *slide(PyObject *self, PyObject *args) {
    PyObject *seqs, *added;
    Py_ssize_t k, b;
    if (!PyArg_ParseTuple(args, "O!nnO", &PyTuple_Type, &seqs, &k, &b, &added))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seqs);
    if (k < 0 || b < k || (added != Py_None && (!PyTuple_Check(added) || PyTuple_GET_SIZE(added) != n))) {
        PyErr_SetString(PyExc_ValueError, "slide: bad arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *seq = PyTuple_GET_ITEM(seqs, i);
        Py_ssize_t len = PySequence_Size(seq);
        if (len < 0 || (len > b && PySequence_DelSlice(seq, b, len) < 0) || (k > 0 && PySequence_DelSlice(seq, 0, k) < 0))
            return NULL;
        if (added != Py_None) {
            PyObject *more = PyTuple_GET_ITEM(added, i);
            int rc = PyList_CheckExact(seq) ? PyList_SetSlice(seq, PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, more)
                                            : call_method(seq, s_extend, more);
            if (rc < 0)
                return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* drop_rows(names, kinds, lo, hi, front, groups, heads, p2p): rows lo..hi-1 of a followed trace (by their marks:
 * each row's group name and kind) taken out of its columns, the first ones of each group (front) or the last:
 * each group's seq, sig, flags, created_ns, duration_us, site and heads[name] lose as many items as it has
 * COLUMN rows there, p2p[name] as many as it has P2P rows. Returns the set of groups that lost p2p ops
 * (trace_window._drop; a group or head it lacks raises KeyError there as here). */
static int drop_from(PyObject *seq, Py_ssize_t n, int front) {
    Py_ssize_t len = PySequence_Size(seq);
    if (len < 0)
        return -1;
    Py_ssize_t lo = front ? 0 : (len - n > 0 ? len - n : 0), hi = front ? (n < len ? n : len) : len;
    return PySequence_DelSlice(seq, lo, hi);
}

static PyObject *drop_rows(PyObject *self, PyObject *args) {
    PyObject *names, *kinds, *groups, *heads, *p2p;
    Py_ssize_t lo, hi;
    int front;
    if (!PyArg_ParseTuple(args, "O!O!nnpO!O!O!", &PyList_Type, &names, &PyByteArray_Type, &kinds, &lo, &hi, &front,
                          &PyDict_Type, &groups, &PyDict_Type, &heads, &PyDict_Type, &p2p))
        return NULL;
    if (lo < 0 || hi > PyList_GET_SIZE(names) || hi > PyByteArray_GET_SIZE(kinds)) {
        PyErr_SetString(PyExc_IndexError, "drop_rows: rows out of range");
        return NULL;
    }
    PyObject *columns = PyDict_New(), *ops = PyDict_New(), *touched = NULL;
    if (columns == NULL || ops == NULL)
        goto done;
    const char *kind = PyByteArray_AS_STRING(kinds);
    for (Py_ssize_t i = lo; i < hi; i++) {
        PyObject *counts = kind[i] == COLUMN ? columns : kind[i] == P2P ? ops : NULL;
        if (counts == NULL)
            continue;
        PyObject *name = PyList_GET_ITEM(names, i), *got = PyDict_GetItemWithError(counts, name);
        if (got == NULL && PyErr_Occurred())
            goto done;
        PyObject *more = PyLong_FromSsize_t(got ? PyLong_AsSsize_t(got) + 1 : 1);
        int rc = more ? PyDict_SetItem(counts, name, more) : -1;
        Py_XDECREF(more);
        if (rc < 0)
            goto done;
    }
    PyObject *name, *count, *cols[7] = {s_seq, s_sig, s_flags, s_created_ns, s_duration_us, s_site, NULL};
    for (Py_ssize_t pos = 0; PyDict_Next(columns, &pos, &name, &count);) {
        Py_ssize_t n = PyLong_AsSsize_t(count);
        PyObject *g = PyDict_GetItemWithError(groups, name), *head = g ? PyDict_GetItemWithError(heads, name) : NULL;
        if (head == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, name);
            goto done;
        }
        for (int c = 0; c < 7; c++) {
            PyObject *col = cols[c] ? PyObject_GetAttr(g, cols[c]) : Py_NewRef(head);
            int rc = col ? drop_from(col, n, front) : -1;
            Py_XDECREF(col);
            if (rc < 0)
                goto done;
        }
    }
    for (Py_ssize_t pos = 0; PyDict_Next(ops, &pos, &name, &count);) {
        PyObject *list = PyDict_GetItemWithError(p2p, name);
        if (list == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, name);
            goto done;
        }
        if (drop_from(list, PyLong_AsSsize_t(count), front) < 0)
            goto done;
    }
    touched = PySet_New(ops);
done:
    Py_XDECREF(columns), Py_XDECREF(ops);
    return touched;
}

/* settle_groups(groups, names, kinds, entries, before, desc_at, id_at, issued): a followed trace's groups as a
 * rebuild has them (trace_window._settle, then settle_issued on each): a new dict of those with a row, in the
 * order of their first rows (a p2p end marker, SKIPPED, opens none), each described (pg_desc, pg_id) by the
 * entry of that row; None where a group's seqs from its `before` count on (at least 1) do not rise strictly;
 * then in each group's flags an op known only to be issued (`issued`: a 256-byte table of flags) is FINISHED
 * but for the group's newest. NotImplemented where a group is not exactly `group_type` or a column or entry
 * is not of its kind, before anything but the descriptions was changed (the caller's Python then does it
 * all, the same way). */
static PyObject *settle_groups(PyObject *self, PyObject *args) {
    PyObject *groups, *names, *kinds, *entries, *before, *group_type;
    Py_ssize_t desc_at, id_at;
    Py_buffer issued;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!nny*O", &PyDict_Type, &groups, &PyList_Type, &names, &PyByteArray_Type,
                          &kinds, &PyList_Type, &entries, &PyDict_Type, &before, &desc_at, &id_at, &issued,
                          &group_type))
        return NULL;
    struct { PyObject *name, *g; Py_ssize_t first; } found[MAX_GROUPS];
    int n_found = 0, rc = 0;
    PyObject *out = NULL, *name, *g;
    Py_ssize_t n_rows = PyList_GET_SIZE(names);
    const char *kind = PyByteArray_AS_STRING(kinds);
    if (issued.len != 256 || PyByteArray_GET_SIZE(kinds) < n_rows || PyDict_GET_SIZE(groups) > MAX_GROUPS)
        goto not_mine;
    for (Py_ssize_t pos = 0; PyDict_Next(groups, &pos, &name, &g);) {
        Py_ssize_t i = 0;
        for (; i < n_rows; i++) {
            PyObject *x = PyList_GET_ITEM(names, i);
            int eq = x == name ? 1 : PyObject_RichCompareBool(x, name, Py_EQ);
            if (eq < 0)
                goto fail;
            if (eq && kind[i] != SKIPPED)
                break;
        }
        if (i == n_rows)
            continue;  /* no row: the group is gone */
        int at = n_found++;
        while (at > 0 && found[at - 1].first > i) {  /* (insertion: a few groups) */
            found[at] = found[at - 1];
            at--;
        }
        found[at].name = name, found[at].g = g, found[at].first = i;
    }
    for (int f = 0; f < n_found; f++) {
        if (found[f].first >= PyList_GET_SIZE(entries))
            goto not_mine;
        PyObject *e = PyList_GET_ITEM(entries, found[f].first);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) <= desc_at || PyTuple_GET_SIZE(e) <= id_at)
            goto not_mine;
        if (PyObject_SetAttr(found[f].g, s_pg_desc, PyTuple_GET_ITEM(e, desc_at)) < 0
            || PyObject_SetAttr(found[f].g, s_pg_id, PyTuple_GET_ITEM(e, id_at)) < 0)
            goto fail;
        PyObject *got = PyDict_GetItemWithError(before, found[f].name);
        if (got == NULL && PyErr_Occurred())
            goto fail;
        Py_ssize_t n = got ? PyLong_AsSsize_t(got) : 0;
        if (n == -1 && PyErr_Occurred())
            goto fail;
        Py_buffer b;
        int held, ordered = 1;
        Py_ssize_t len = 0;
        rc = group_columns(found[f].g, group_type, 1, &s_seq, "q", &b, &held, &len);
        const int64_t *v = rc == 0 ? b.buf : NULL;
        for (Py_ssize_t j = n > 1 ? n : 1; rc == 0 && j < len; j++)
            if (v[j - 1] >= v[j]) {
                ordered = 0;
                break;
            }
        release_views(&b, &held);
        if (rc < 0)
            goto fail;
        if (rc == COLUMNS_ODD)
            goto not_mine;
        if (!ordered) {
            PyBuffer_Release(&issued);
            Py_RETURN_NONE;
        }
    }
    /* every group's flags are checked before any is changed: NotImplemented leaves them as they were */
    Py_buffer flags[MAX_GROUPS];
    int n_flags = 0;
    for (; n_flags < n_found; n_flags++) {
        PyObject *col = PyObject_GetAttr(found[n_flags].g, s_flags);
        rc = col ? PyObject_GetBuffer(col, &flags[n_flags], PyBUF_WRITABLE | PyBUF_FORMAT) : -1;
        Py_XDECREF(col);
        if (rc < 0)
            break;
        if (flags[n_flags].itemsize != 1 || !flags[n_flags].format || strcmp(flags[n_flags].format, "B") != 0) {
            PyBuffer_Release(&flags[n_flags]);
            rc = 1;
            break;
        }
    }
    const unsigned char *table = issued.buf;
    for (int f = 0; rc == 0 && f < n_found; f++) {
        unsigned char *x = flags[f].buf;
        Py_ssize_t last = flags[f].len - 1;
        for (Py_ssize_t j = 0; j < last; j++)
            if (table[x[j]])
                x[j] |= (unsigned char)FINISHED;
        if (last >= 0 && table[x[last]])
            x[last] &= (unsigned char)~FINISHED;
    }
    for (int f = 0; f < n_flags; f++)
        PyBuffer_Release(&flags[f]);
    if (rc < 0)
        goto fail;
    if (rc > 0)
        goto not_mine;
    if ((out = PyDict_New()) == NULL)
        goto fail;
    for (int f = 0; f < n_found; f++)
        if (PyDict_SetItem(out, found[f].name, found[f].g) < 0) {
            Py_CLEAR(out);
            break;
        }
    PyBuffer_Release(&issued);
    return out;
not_mine:
    PyBuffer_Release(&issued);
    Py_RETURN_NOTIMPLEMENTED;
fail:
    PyBuffer_Release(&issued);
    return NULL;
}

/* an entry's record id (`at`: its position), where it is an int of 64 bits: 1, else 0 */
static int rid_of(PyObject *e, Py_ssize_t at, int64_t *out) {
    return PyTuple_Check(e) && PyTuple_GET_SIZE(e) > at && fits_int64(PyTuple_GET_ITEM(e, at), out);
}

/* where `x` falls among the record ids of items[0..n) (bisect_left): 1 with *k, 0 where an id read is not ours */
static int bisect_rid(PyObject *const *items, Py_ssize_t n, Py_ssize_t at, int64_t x, Py_ssize_t *k) {
    Py_ssize_t lo = 0, hi = n;
    int64_t v;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (!rid_of(items[mid], at, &v))
            return 0;
        if (v < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    *k = lo;
    return 1;
}

/* merged_window(held, sent, rid_at): a rank's held window with what its peer sent from the cursor on
 * (sources/peers._window): held[:p] + the held entries from p on updated by the sent ones, p the bisect_left
 * of the first sent id among the held ones' ids; a held entry sent again equal to itself stays the held
 * object. Answered here in the usual case only, the sent ids rising and the held ones from p on the first of
 * them (the ones still unfinished, sent again): (window, first sent id). NotImplemented otherwise, or where an
 * entry read is not a tuple with an int record id of 64 bits (the caller's Python merges them). */
static PyObject *merged_window(PyObject *self, PyObject *args) {
    PyObject *held, *sent;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyTuple_Type, &held, &PyTuple_Type, &sent, &at))
        return NULL;
    Py_ssize_t nh = PyTuple_GET_SIZE(held), ns = PyTuple_GET_SIZE(sent);
    if (ns == 0 || at < 0)
        Py_RETURN_NOTIMPLEMENTED;
    int64_t first = 0, v, prev = 0;
    for (Py_ssize_t i = 0; i < ns; i++) {
        if (!rid_of(PyTuple_GET_ITEM(sent, i), at, &v) || (i > 0 && v <= prev))
            Py_RETURN_NOTIMPLEMENTED;
        prev = v;
        if (i == 0)
            first = v;
    }
    Py_ssize_t p;
    if (!bisect_rid(PySequence_Fast_ITEMS(held), nh, at, first, &p))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t again = nh - p;
    if (again > ns)
        Py_RETURN_NOTIMPLEMENTED;
    for (Py_ssize_t i = 0; i < again; i++) {
        int64_t w;
        if (!rid_of(PyTuple_GET_ITEM(held, p + i), at, &v) || !rid_of(PyTuple_GET_ITEM(sent, i), at, &w) || v != w)
            Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *out = PyTuple_New(p + ns);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < p; i++)
        PyTuple_SET_ITEM(out, i, Py_NewRef(PyTuple_GET_ITEM(held, i)));
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *e = PyTuple_GET_ITEM(sent, i);
        if (i < again) {
            PyObject *h = PyTuple_GET_ITEM(held, p + i);
            int eq = h == e ? 1 : PyObject_RichCompareBool(h, e, Py_EQ);
            if (eq < 0) {
                Py_DECREF(out);
                return NULL;
            }
            if (eq)
                e = h;
        }
        PyTuple_SET_ITEM(out, p + i, Py_NewRef(e));
    }
    return Py_BuildValue("(NL)", out, (long long)first);
}

/* window_cut(new, old, rid_at): where a followed window's new entries meet its old ones (trace_window._follow):
 * (k, same), k the bisect_left of new[0]'s record id among old's (the entries before it left the window), same
 * leading_same(new, old, k); None where new's record ids from new[same - 1] on do not rise strictly (the kept
 * ones are old's, in order already). NotImplemented where an entry read is not a tuple holding an int record
 * id of 64 bits (the caller's Python passes decide). In a big view these entries are cold in the cache: a
 * Python bisect with a key and a list of the ids read each one through an attribute getter. */
static PyObject *window_cut(PyObject *self, PyObject *args) {
    PyObject *a, *b;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "OOn", &a, &b, &at))
        return NULL;
    if ((!PyTuple_CheckExact(a) && !PyList_CheckExact(a)) || (!PyTuple_CheckExact(b) && !PyList_CheckExact(b))
        || at < 0 || PySequence_Fast_GET_SIZE(a) == 0)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t na = PySequence_Fast_GET_SIZE(a), nb = PySequence_Fast_GET_SIZE(b);
    PyObject **x = PySequence_Fast_ITEMS(a), **y = PySequence_Fast_ITEMS(b);
    int64_t first, v, prev = 0;
    if (!rid_of(x[0], at, &first))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t k;
    if (!bisect_rid(y, nb, at, first, &k))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t same = same_run(x, na, y, nb, k);
    for (Py_ssize_t i = same > 0 ? same - 1 : 0, from = i; i < na; i++) {
        if (!rid_of(x[i], at, &v))
            Py_RETURN_NOTIMPLEMENTED;
        if (i > from && v <= prev)
            Py_RETURN_NONE;
        prev = v;
    }
    return Py_BuildValue("(nn)", k, same);
}

/* The few distinct keys of a sample (its groups' names, its backends) kept in C while it is read, then put in
 * their dict (with their last number) or set once each, in the order first seen: the same dict or set as an
 * insertion per entry (last value winning), without a hash lookup per entry. Keys are exact str, found by
 * pointer, else by equality; past SEEN of them the rest go to the dict or set one by one. */
#define SEEN 16
typedef struct {
    int n, spilled, is_set;
    PyObject *key[SEEN]; /* borrowed: the columns hold them */
    int64_t value[SEEN];
} Seen;

static int put_seen(const Seen *seen, PyObject *into, PyObject *key, int64_t value) {
    if (seen->is_set)
        return PySet_Add(into, key);
    PyObject *v = PyLong_FromLongLong(value);
    int rc = v == NULL ? -1 : PyDict_SetItem(into, key, v);
    Py_XDECREF(v);
    return rc;
}

static int flush(Seen *seen, PyObject *into) {
    for (int j = 0; j < seen->n; j++)
        if (put_seen(seen, into, seen->key[j], seen->value[j]) < 0)
            return -1;
    seen->n = 0;
    return 0;
}

static int remember(Seen *seen, PyObject *into, PyObject *key, int64_t value) {
    if (seen->spilled)
        return put_seen(seen, into, key, value);
    for (int j = 0; j < seen->n; j++)
        if (seen->key[j] == key) {
            seen->value[j] = value;
            return 0;
        }
    for (int j = 0; j < seen->n; j++)
        if (PyUnicode_Compare(seen->key[j], key) == 0) {
            seen->value[j] = value;
            return 0;
        }
    if (seen->n < SEEN) {
        seen->key[seen->n] = key, seen->value[seen->n] = value;
        seen->n++;
        return 0;
    }
    if (flush(seen, into) < 0)
        return -1;
    seen->spilled = 1;
    return remember(seen, into, key, value);
}

/* One of EdgeFacts' number columns: an array('q') read in place, or a list of ints. */
typedef struct {
    PyObject *list; /* borrowed; NULL where read through `view` */
    Py_buffer view;
    int held;
    Py_ssize_t len;
} Numbers;

/* 0, or 1 where col is neither (the caller answers NotImplemented) */
static int numbers_of(PyObject *col, Numbers *c) {
    c->held = 0, c->list = NULL;
    if (PyList_CheckExact(col)) {
        c->list = col, c->len = PyList_GET_SIZE(col);
        return 0;
    }
    if (!PyObject_CheckBuffer(col) || PyObject_GetBuffer(col, &c->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 1;
    }
    c->held = 1, c->len = c->view.len / 8;
    return !(c->view.itemsize == 8 && c->view.format != NULL && (!strcmp(c->view.format, "q") || !strcmp(c->view.format, "l")));
}

static int number_at(const Numbers *c, Py_ssize_t i, int64_t *v) {
    if (c->list == NULL) {
        *v = ((const int64_t *)c->view.buf)[i];
        return 1;
    }
    return fits_int64(PyList_GET_ITEM(c->list, i), v);
}

/* edge_header(pg_name, created, started, completed, timeout, events, sample): what a trace's header reads of
 * its window's edge facts (rank_trace.EdgeFacts: six columns, one value per entry; the four numbers' arrays
 * or lists), over the first and last `sample` entries (all where there are at most twice as many): (first
 * and last nonzero created or None, the newest of created/started/completed or None, {pg_name: nonzero
 * timeout, the last one winning}, the set of non-None events). NotImplemented where a value is not of its
 * kind (an int past 64 bits, a name that is no str): EdgeFacts.header's Python passes then decide. No Python
 * code runs meanwhile. */
static PyObject *edge_header(PyObject *self, PyObject *args) {
    PyObject *names, *number_cols[4], *event_col, *out = NULL;
    Py_ssize_t sample;
    if (!PyArg_ParseTuple(args, "O!OOOOO!n", &PyList_Type, &names, &number_cols[0], &number_cols[1],
                          &number_cols[2], &number_cols[3], &PyList_Type, &event_col, &sample))
        return NULL;
    Numbers cols[4];
    int odd = 0, held = 0;
    Py_ssize_t n = PyList_GET_SIZE(names);
    for (; held < 4 && !odd; held++)
        odd = numbers_of(number_cols[held], &cols[held]) || cols[held].len != n;
    PyObject *timeouts = NULL, *events = NULL;
    if (odd || PyList_GET_SIZE(event_col) != n)
        goto not_mine;
    if ((timeouts = PyDict_New()) == NULL || (events = PyFrozenSet_New(NULL)) == NULL)
        goto done;
    int64_t first = 0, last = 0, newest = 0;
    int any = 0;
    Seen timeouts_seen = {0}, events_seen = {.is_set = 1};
    for (Py_ssize_t k = 0, i; k < n; k++) {
        i = k;
        if (n > 2 * sample && k >= sample) {  /* the last `sample` ones */
            if (k >= 2 * sample)
                break;
            i = n - 2 * sample + k;
        }
        int64_t v[4];
        for (int c = 0; c < 4; c++)
            if (!number_at(&cols[c], i, &v[c]))
                goto not_mine;
        PyObject *name = PyList_GET_ITEM(names, i), *event = PyList_GET_ITEM(event_col, i);
        if (!PyUnicode_CheckExact(name) || (event != Py_None && !PyUnicode_CheckExact(event)))
            goto not_mine;
        if (v[0]) {
            if (!any || v[0] < first)
                first = v[0];
            if (!any || v[0] > last)
                last = v[0];
            any = 1;
        }
        for (int c = 0; c < 3; c++)
            if (v[c] > newest)
                newest = v[c];
        if (v[3] && remember(&timeouts_seen, timeouts, name, v[3]) < 0)
            goto done;
        if (event != Py_None && remember(&events_seen, events, event, 0) < 0)
            goto done;
    }
    if (flush(&timeouts_seen, timeouts) < 0 || flush(&events_seen, events) < 0)
        goto done;
    out = Py_BuildValue("(NNNOO)", any ? PyLong_FromLongLong(first) : Py_NewRef(Py_None),
                        any ? PyLong_FromLongLong(last) : Py_NewRef(Py_None),
                        newest ? PyLong_FromLongLong(newest) : Py_NewRef(Py_None), timeouts, events);
    goto done;
not_mine:
    out = Py_NewRef(Py_NotImplemented);
done:
    for (int c = 0; c < held; c++)
        if (cols[c].held)
            PyBuffer_Release(&cols[c].view);
    Py_XDECREF(timeouts), Py_XDECREF(events);
    return out;
}

/* first_unsettled(entries, start, stop, state_at, retired_at, completed): the index of the first entry of
 * entries[start:stop] (a tuple or list of Entry) whose state is not `completed` and that is not retired
 * (outcome.first_unsettled's rule), None where all are settled; NotImplemented where an entry is not a tuple
 * holding both fields, its state is not a str or its retired not None or a bool (the caller's Python pass
 * then decides: nothing here can run Python code while it holds the sequence's items). */
static PyObject *first_unsettled(PyObject *self, PyObject *args) {
    PyObject *entries, *completed;
    Py_ssize_t start, stop, state_at, retired_at;
    if (!PyArg_ParseTuple(args, "OnnnnU", &entries, &start, &stop, &state_at, &retired_at, &completed))
        return NULL;
    if (!PyTuple_CheckExact(entries) && !PyList_CheckExact(entries))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(entries), need = (state_at > retired_at ? state_at : retired_at) + 1;
    PyObject **items = PySequence_Fast_ITEMS(entries);
    if (start < 0 || state_at < 0 || retired_at < 0)
        Py_RETURN_NOTIMPLEMENTED;
    if (stop > n)
        stop = n;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *e = items[i];
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < need)
            Py_RETURN_NOTIMPLEMENTED;
        PyObject *state = PyTuple_GET_ITEM(e, state_at), *retired = PyTuple_GET_ITEM(e, retired_at);
        if (!PyUnicode_CheckExact(state) || (retired != Py_None && !PyBool_Check(retired)))
            Py_RETURN_NOTIMPLEMENTED;
        if (retired == Py_True || state == completed || PyUnicode_Compare(state, completed) == 0)
            continue;
        return PyLong_FromSsize_t(i);
    }
    Py_RETURN_NONE;
}

/* --- the tails of every (rank, group) the analysis reads each pass (placement.py, live/diagnosis.py) ------ */

/* One group's seq, flags and created_ns columns, read in place. */
typedef struct {
    Py_buffer v[3];
    int held;
    const int64_t *seq, *created;
    const unsigned char *flags;
    Py_ssize_t n;
} Tail;

static void tail_release(Tail *t) { release_views(t->v, &t->held); }

/* 0, 1 where g is not exactly `group_type` or its columns not int64 / bytes of one length (the caller answers
 * NotImplemented), -1 with an exception. */
static int tail_of(PyObject *g, PyObject *group_type, Tail *t) {
    PyObject *const names[3] = {s_seq, s_created_ns, s_flags};
    int rc = group_columns(g, group_type, 3, names, "qqB", t->v, &t->held, &t->n);
    if (rc != 0) {
        tail_release(t);
        return rc == COLUMNS_ODD ? 1 : -1;
    }
    t->seq = t->v[0].buf, t->created = t->v[1].buf, t->flags = t->v[2].buf;
    return 0;
}

/* a trace's groups dict, borrowed: NULL with 1 in *odd where t is not exactly `trace_type` or has no dict */
static PyObject *groups_of(PyObject *t, PyObject *trace_type, int *odd) {
    *odd = 0;
    if ((PyObject *)Py_TYPE(t) != trace_type) {
        *odd = 1;
        return NULL;
    }
    PyObject *groups = PyObject_GetAttr(t, s_groups);
    if (groups == NULL)
        return NULL;
    Py_DECREF(groups); /* (the trace holds it, and nothing here runs code that could let it go) */
    if (!PyDict_CheckExact(groups)) {
        *odd = 1;
        return NULL;
    }
    return groups;
}

/* the last index below `below` whose flags the table marks, -1 if none */
static Py_ssize_t last_marked(const Tail *t, Py_ssize_t below, const unsigned char *table) {
    for (Py_ssize_t i = below - 1; i >= 0; i--)
        if (table[t->flags[i]])
            return i;
    return -1;
}

static int check_table(Py_ssize_t len) {
    if (len != 256) {
        PyErr_SetString(PyExc_ValueError, "a flags table is 256 bytes");
        return -1;
    }
    return 0;
}

#define STOP_TRACE 2 /* a visit's answer: no more of this trace's groups */

/* visit(state, trace index, group name, tail) for every group of every trace, each group's columns read in
 * place (and released after): 0, 1 (a trace, name or group the caller leaves to Python: NotImplemented), or
 * -1 with an exception. Names are exact str only: hashing or comparing them runs no Python code. */
typedef int (*Visit)(void *state, Py_ssize_t trace, PyObject *name, const Tail *t);

static int each_group(PyObject *traces, PyObject *trace_type, PyObject *group_type, Visit visit, void *state) {
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(traces); r++) {
        int odd;
        PyObject *groups = groups_of(PyList_GET_ITEM(traces, r), trace_type, &odd), *name, *g;
        if (groups == NULL)
            return odd ? 1 : -1;
        Py_ssize_t pos = 0;
        while (PyDict_Next(groups, &pos, &name, &g)) {
            Tail t;
            if (!PyUnicode_CheckExact(name))
                return 1;
            int rc = tail_of(g, group_type, &t);
            if (rc != 0)
                return rc;
            rc = visit(state, r, name, &t);
            tail_release(&t);
            if (rc == STOP_TRACE)
                break;
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* each_group's walk with its state's `out` (a new reference, stolen) as the call's answer: `out`,
 * NotImplemented, or NULL with an exception */
static PyObject *walk_into(PyObject *out, PyObject *traces, PyObject *trace_type, PyObject *group_type, Visit visit,
                           void *state) {
    int rc = each_group(traces, trace_type, group_type, visit, state);
    if (rc == 0)
        return out;
    Py_DECREF(out);
    if (rc == 1)
        Py_RETURN_NOTIMPLEMENTED;
    return NULL;
}

/* passed_through(traces, trace type, group type, proven done table) -> {group name: the newest seq some rank
 * proved complete and then went past} (placement.passed_through), or NotImplemented */
typedef struct {
    PyObject *out;
    const unsigned char *table;
} Through;

static int through(void *state, Py_ssize_t trace, PyObject *name, const Tail *t) {
    Through *st = state;
    Py_ssize_t i = t->n >= 2 ? last_marked(t, t->n - 1, st->table) : -1; /* not the last: it went past it */
    if (i < 0)
        return 0;
    PyObject *have = PyDict_GetItemWithError(st->out, name);
    long long cur = -1;
    if (have != NULL) {
        int overflow;
        cur = PyLong_AsLongLongAndOverflow(have, &overflow); /* (an int this function put there) */
    } else if (PyErr_Occurred())
        return -1;
    if (t->seq[i] <= cur)
        return 0;
    PyObject *v = PyLong_FromLongLong(t->seq[i]);
    int rc = v == NULL || PyDict_SetItem(st->out, name, v) < 0 ? -1 : 0;
    Py_XDECREF(v);
    return rc;
}

static PyObject *passed_through(PyObject *self, PyObject *args) {
    PyObject *traces, *trace_type, *group_type;
    Through st;
    Py_ssize_t table_len;
    if (!PyArg_ParseTuple(args, "O!OOy#", &PyList_Type, &traces, &trace_type, &group_type, &st.table, &table_len) ||
        check_table(table_len) < 0 || (st.out = PyDict_New()) == NULL)
        return NULL;
    return walk_into(st.out, traces, trace_type, group_type, through, &st);
}

/* behind(ranks, traces, trace type, group type, passed) -> {rank: (group name, the first op its records lack)}
 * for the ranks whose records of a group end before the seq `passed` names (placement.behind), or NotImplemented */
typedef struct {
    PyObject *out, *ranks, *passed;
} Behind;

static int lacks(void *state, Py_ssize_t trace, PyObject *name, const Tail *t) {
    Behind *st = state;
    PyObject *p = PyDict_GetItemWithError(st->passed, name);
    int64_t limit, next;
    if (p == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!fits_int64(p, &limit))
        return 1;
    if (!t->n)
        return 0;
    if (__builtin_add_overflow(t->seq[t->n - 1], (int64_t)1, &next))
        return 1;
    if (next > limit)
        return 0;
    PyObject *v = Py_BuildValue("(OL)", name, (long long)next);
    int rc = v == NULL || PyDict_SetItem(st->out, PyList_GET_ITEM(st->ranks, trace), v) < 0 ? -1 : STOP_TRACE;
    Py_XDECREF(v);
    return rc;
}

static PyObject *behind(PyObject *self, PyObject *args) {
    PyObject *traces, *trace_type, *group_type;
    Behind st;
    if (!PyArg_ParseTuple(args, "O!O!OOO!", &PyList_Type, &st.ranks, &PyList_Type, &traces, &trace_type, &group_type,
                          &PyDict_Type, &st.passed))
        return NULL;
    if (PyList_GET_SIZE(st.ranks) != PyList_GET_SIZE(traces)) {
        PyErr_SetString(PyExc_ValueError, "behind: not one rank per trace");
        return NULL;
    }
    if ((st.out = PyDict_New()) == NULL)
        return NULL;
    return walk_into(st.out, traces, trace_type, group_type, lacks, &st);
}

/* One (rank, group) of passed_by_peers: its newest seq, and its newest proven completion if any. */
typedef struct {
    Py_ssize_t name, trace;
    int64_t last, done_seq, done_created;
    int done;
} Tip;

static int by_name(const void *a, const void *b) { /* stable: by name, then in trace order */
    const Tip *x = a, *y = b;
    if (x->name != y->name)
        return x->name < y->name ? -1 : 1;
    return (x->trace > y->trace) - (x->trace < y->trace);
}

typedef struct {
    PyObject *names; /* group name -> its index, in the order first met */
    Tip *tips;
    Py_ssize_t n, cap;
    const unsigned char *table;
} Tips;

static int tip(void *state, Py_ssize_t trace, PyObject *name, const Tail *t) {
    Tips *st = state;
    if (!t->n)
        return 0;
    PyObject *at = PyDict_GetItemWithError(st->names, name);
    Py_ssize_t k = PyDict_GET_SIZE(st->names);
    if (at != NULL)
        k = PyLong_AsSsize_t(at);
    else if (PyErr_Occurred())
        return -1;
    else {
        PyObject *v = PyLong_FromSsize_t(k);
        int rc = v == NULL || PyDict_SetItem(st->names, name, v) < 0 ? -1 : 0;
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    if (st->n == st->cap) {
        Py_ssize_t want = st->cap ? 2 * st->cap : 1024;
        Tip *more = PyMem_Realloc(st->tips, (size_t)want * sizeof(Tip));
        if (more == NULL)
            return PyErr_NoMemory(), -1;
        st->tips = more, st->cap = want;
    }
    Py_ssize_t i = last_marked(t, t->n, st->table);
    st->tips[st->n++] = (Tip){k, trace, t->seq[t->n - 1], i >= 0 ? t->seq[i] : 0, i >= 0 ? t->created[i] : 0, i >= 0};
    return 0;
}

/* passed_by_peers(traces, seen, trace type, group type, proven done table, stall after ns) -> the indices of
 * the traces whose peers completed a collective of a group beyond the last one the rank issued, the stall
 * threshold before the rank was seen (live/diagnosis._passed_by_peers with nothing failed), or NotImplemented.
 * `seen`: each trace's seen_at_ns (an int, or None). */
static PyObject *passed_by_peers(PyObject *self, PyObject *args) {
    PyObject *traces, *seen, *trace_type, *group_type;
    const unsigned char *table;
    Py_ssize_t table_len;
    long long stall_ll;
    if (!PyArg_ParseTuple(args, "O!O!OOy#L", &PyList_Type, &traces, &PyList_Type, &seen, &trace_type, &group_type,
                          &table, &table_len, &stall_ll) || check_table(table_len) < 0)
        return NULL;
    if (PyList_GET_SIZE(seen) != PyList_GET_SIZE(traces)) {
        PyErr_SetString(PyExc_ValueError, "passed_by_peers: not one seen time per trace");
        return NULL;
    }
    Tips st = {PyDict_New(), NULL, 0, 0, table};
    PyObject *out = NULL;
    int rc = st.names == NULL ? -1 : each_group(traces, trace_type, group_type, tip, &st);
    Tip *tips = st.tips;
    Py_ssize_t n_tips = st.n;
    if (rc == 0)
        qsort(tips, (size_t)n_tips, sizeof(Tip), by_name);
    if (rc == 0 && (out = PySet_New(NULL)) == NULL)
        rc = -1;
    for (Py_ssize_t a = 0; rc == 0 && a < n_tips;) {
        Py_ssize_t b = a;
        while (b < n_tips && tips[b].name == tips[a].name)
            b++;
        /* the highest completion, the first among equals; the highest of the others (where the rank holding
         * it is the rank asked about) */
        Py_ssize_t best = -1, second = -1;
        for (Py_ssize_t i = a; i < b; i++)
            if (tips[i].done && (best < 0 || tips[i].done_seq > tips[best].done_seq))
                best = i;
        for (Py_ssize_t i = a; best >= 0 && i < b; i++)
            if (tips[i].done && i != best && (second < 0 || tips[i].done_seq > tips[second].done_seq))
                second = i;
        for (Py_ssize_t i = a; best >= 0 && rc == 0 && i < b; i++) {
            Py_ssize_t beyond = i == best ? second : best;
            if (beyond < 0 || tips[beyond].done_seq <= tips[i].last)
                continue;
            PyObject *s = PyList_GET_ITEM(seen, tips[i].trace);
            int64_t seen_ns, since;
            if (s == Py_None)
                continue;
            if (!fits_int64(s, &seen_ns)) {
                rc = (PyErr_Clear(), 1);
                break;
            }
            if (seen_ns == 0)
                continue;
            if (__builtin_sub_overflow(seen_ns, tips[beyond].done_created, &since)) {
                rc = 1;
                break;
            }
            if (since >= (int64_t)stall_ll) {
                PyObject *v = PyLong_FromSsize_t(tips[i].trace);
                rc = v == NULL || PySet_Add(out, v) < 0 ? -1 : 0;
                Py_XDECREF(v);
            }
        }
        a = b;
    }
    Py_XDECREF(st.names);
    PyMem_Free(tips);
    if (rc != 0)
        Py_CLEAR(out);
    if (rc == 1)
        Py_RETURN_NOTIMPLEMENTED;
    return out;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(entry field positions, OpSignature, P2POp, tuple.__new__, STARTED, "
                                   "FINISHED, ISSUED, P2P, COLUMN, SKIPPED)"},
    {"untrack", untrack, METH_O, "untrack(objects): the plain tuples among them out of the cyclic collector's lists"},
    {"entries", entries_of, METH_VARARGS, "entries(entry_type, columns, fields) -> a tuple of entry_type rows, "
                                          "untracked where plain, or NotImplemented"},
    {"entries_from", entries_from, METH_VARARGS, "entries_from(entry_type, templates, kind_of, numbers, slots, fields) "
                                                 "-> a tuple of entry_type rows, or NotImplemented"},
    {"edge_facts", edge_facts, METH_VARARGS, "edge_facts(entries, field positions..., scheduled) -> six columns, or "
                                             "NotImplemented"},
    {"recent_p2p", recent_p2p, METH_VARARGS, "recent_p2p(ops, keep, finished) -> the recent ops, or NotImplemented"},
    {"leading_same", leading_same, METH_VARARGS, "leading_same(new, old, k) -> how many of new are old[k:]'s "
                                                 "objects, or NotImplemented"},
    {"slide", slide, METH_VARARGS, "slide(seqs, k, b, added) -> None: each seq to seq[k:b] + added[i]"},
    {"drop_rows", drop_rows, METH_VARARGS, "drop_rows(names, kinds, lo, hi, front, groups, heads, p2p) -> the groups "
                                           "that lost p2p ops"},
    {"settle_groups", settle_groups, METH_VARARGS, "settle_groups(groups, names, kinds, entries, before, desc_at, "
                                                   "id_at, issued, GroupTrace) -> the groups, None or "
                                                   "NotImplemented"},
    {"merged_window", merged_window, METH_VARARGS, "merged_window(held, sent, record_id_at) -> (window, first "
                                                   "sent id), or NotImplemented"},
    {"window_cut", window_cut, METH_VARARGS, "window_cut(new, old, record_id_at) -> (k, same), None where new's "
                                             "ids do not rise, or NotImplemented"},
    {"edge_header", edge_header, METH_VARARGS, "edge_header(pg_name, created, started, completed, timeout, events, "
                                               "sample) -> (first, last created, newest event, timeouts, events)"},
    {"first_unsettled", first_unsettled, METH_VARARGS, "first_unsettled(entries, start, stop, state_at, "
                                                       "retired_at, completed) -> index, None or NotImplemented"},
    {"passed_through", passed_through, METH_VARARGS, "passed_through(traces, RankTrace, GroupTrace, proven done "
                                                     "table) -> {group name: seq}, or NotImplemented"},
    {"behind", behind, METH_VARARGS, "behind(ranks, traces, RankTrace, GroupTrace, passed) -> {rank: (group name, "
                                     "seq)}, or NotImplemented"},
    {"passed_by_peers", passed_by_peers, METH_VARARGS, "passed_by_peers(traces, seen, RankTrace, GroupTrace, proven "
                                                       "done table, stall after ns) -> trace indices, or NotImplemented"},
    {"append", append, METH_VARARGS, "append(entries, start, first_row, groups, outcome_flags, site_index, "
                                     "call_sites, sig_index, signatures, sigs, heads, mark names, kinds, sites) -> "
                                     "the first entry not taken"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) {
#define NAME(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    NAME(s_seq, "seq"); NAME(s_sig, "sig"); NAME(s_flags, "flags"); NAME(s_created_ns, "created_ns");
    NAME(s_duration_us, "duration_us"); NAME(s_site, "site"); NAME(s_p2p, "p2p"); NAME(s_frombytes, "frombytes");
    NAME(s_extend, "extend"); NAME(coalesced, "coalesced"); NAME(s_groups, "groups");
    NAME(s_pg_desc, "pg_desc"); NAME(s_pg_id, "pg_id");
#undef NAME
    return PyModule_Create(&module);
}
