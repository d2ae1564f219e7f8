/* The compiled passes of model/entry_runs.py over a snapshot's entries (optional: without a compiler
 * entry_runs does the same in Python). A busy rank's live read brings a thousand entries, nearly all of
 * a few kinds in long runs; the live state's ingest looks at each kind once per run instead of making
 * a tuple per entry.
 *
 * runs(entries, positions) -> [(key, count), ...] | NotImplemented
 *     consecutive entries whose fields at `positions` are equal, as one run: its key (those fields as a
 *     tuple, or the field itself for one position) and its length, in order.
 * distinct(entries, positions) -> set | NotImplemented
 *     the keys of those runs, as a set (a key made once per run, not once per entry)
 * record_ids(entries, position) -> (array('q') of the ids, whether they ascend) | NotImplemented
 * newest(entries, positions) -> int | NotImplemented
 *     the greatest of the int fields at `positions` over every entry, None skipped, and 0 at least
 * ascends(ids) -> bool | NotImplemented
 *     whether an array('q') of record ids strictly ascends (the scanner's column of them)
 * any_set(entries, positions) -> bool | NotImplemented
 *     whether some entry holds anything but None at one of `positions` (stops at the first)
 *
 * NotImplemented where an entry is not a tuple long enough, a field compared is not of the plain types
 * the decoders make, or an id or time is not an int of 64 bits: the Python passes decide then. Fields
 * are compared as == does (the identical object first); nothing here runs Python code. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_group_columns.h"

#define MAX_POSITIONS 8

static int entries_view(PyObject *entries, PyObject ***items, Py_ssize_t *n) {
    if (!PyTuple_CheckExact(entries) && !PyList_CheckExact(entries))
        return 0;
    *items = PySequence_Fast_ITEMS(entries);
    *n = PySequence_Fast_GET_SIZE(entries);
    return 1;
}

/* A value compared, hashed or kept as a key: only the plain types the decoders make (a str, an int or a
 * bool, None, a float, a tuple: sizes and dtypes, of the same), so that no comparison runs Python code. */
static int plain(PyObject *v) {
    return PyUnicode_CheckExact(v) || PyLong_CheckExact(v) || PyBool_Check(v) || v == Py_None || PyFloat_CheckExact(v)
           || PyTuple_CheckExact(v);
}

static PyObject *run_key(PyObject *e, const Py_ssize_t *pos, int np) {
    if (np == 1)
        return Py_NewRef(PyTuple_GET_ITEM(e, pos[0]));
    PyObject *key = PyTuple_New(np);
    if (key)
        for (int j = 0; j < np; j++)
            PyTuple_SET_ITEM(key, j, Py_NewRef(PyTuple_GET_ITEM(e, pos[j])));
    return key;
}

/* Each run of `entries` once: its key added to the set `into`, or (key, count) appended to the list. */
static int add_run(PyObject *into, PyObject *e, const Py_ssize_t *pos, int np, Py_ssize_t count) {
    PyObject *key = run_key(e, pos, np);
    if (!key)
        return -1;
    if (PySet_Check(into)) {
        int rc = PySet_Add(into, key);
        Py_DECREF(key);
        return rc;
    }
    PyObject *run = Py_BuildValue("(Nn)", key, count);
    int rc = run ? PyList_Append(into, run) : -1;
    Py_XDECREF(run);
    return rc;
}

/* The runs of `entries` by the fields at `positions` into a new set or list; NotImplemented where an
 * entry is not a tuple long enough. */
static PyObject *each_run(PyObject *args, int as_set) {
    PyObject *entries, *positions, **items;
    Py_ssize_t n, pos[MAX_POSITIONS], need = 0;
    if (!PyArg_ParseTuple(args, "OO!", &entries, &PyTuple_Type, &positions))
        return NULL;
    int np = (int)PyTuple_GET_SIZE(positions);
    if (np < 1 || np > MAX_POSITIONS) {
        PyErr_SetString(PyExc_ValueError, "runs: 1 to 8 positions");
        return NULL;
    }
    for (int j = 0; j < np; j++) {
        if ((pos[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, j))) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "runs: a negative position");
            return NULL;
        }
        need = pos[j] >= need ? pos[j] + 1 : need;
    }
    if (!PyTuple_CheckExact(entries) && !PyList_CheckExact(entries))
        Py_RETURN_NOTIMPLEMENTED;
    /* (a list is read through a tuple of its items: what is made below can start a collection, whose
     * finalizers run Python code that could change a list under a pointer to its items) */
    PyObject *held = PySequence_Tuple(entries), *out = NULL;
    if (!held)
        return NULL;
    items = PySequence_Fast_ITEMS(held);
    n = PyTuple_GET_SIZE(held);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyTuple_Check(items[i]) || PyTuple_GET_SIZE(items[i]) < need)
            goto odd;
        for (int j = 0; j < np; j++)
            if (!plain(PyTuple_GET_ITEM(items[i], pos[j])))
                goto odd;
    }
    out = as_set ? PySet_New(NULL) : PyList_New(0);
    if (!out || n == 0)
        goto done;
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 1; i <= n; i++) {
        int same = i < n;
        for (int j = 0; same && j < np; j++) {
            PyObject *a = PyTuple_GET_ITEM(items[i], pos[j]), *b = PyTuple_GET_ITEM(items[start], pos[j]);
            if (a != b && (same = PyObject_RichCompareBool(a, b, Py_EQ)) < 0)
                goto fail;
        }
        if (same)
            continue;
        if (add_run(out, items[start], pos, np, i - start) < 0)
            goto fail;
        start = i;
    }
    goto done;
odd:
    out = Py_NewRef(Py_NotImplemented);
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_DECREF(held);
    return out;
}

static PyObject *runs(PyObject *self, PyObject *args) { return each_run(args, 0); }

static PyObject *distinct(PyObject *self, PyObject *args) { return each_run(args, 1); }

static PyObject *record_ids(PyObject *self, PyObject *args) {
    PyObject *entries, **items;
    Py_ssize_t n, at;
    if (!PyArg_ParseTuple(args, "On", &entries, &at))
        return NULL;
    if (at < 0 || !entries_view(entries, &items, &n))
        Py_RETURN_NOTIMPLEMENTED;
    int64_t *ids = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    if (!ids)
        return PyErr_NoMemory();
    int ascending = 1, odd = 0;
    for (Py_ssize_t i = 0; i < n && !odd; i++) {
        PyObject *e = items[i], *v;
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) <= at || !PyLong_CheckExact(v = PyTuple_GET_ITEM(e, at))) {
            odd = 1;
            break;
        }
        int overflow;
        long long id = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (id == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            odd = 1;
            break;
        }
        ids[i] = id;
        ascending &= i == 0 || ids[i - 1] < id;
    }
    PyObject *out = NULL;
    if (odd) {
        out = Py_NewRef(Py_NotImplemented);
    } else {
        PyObject *arr = array_q(ids, n);
        out = arr ? Py_BuildValue("(NO)", arr, ascending ? Py_True : Py_False) : NULL;
    }
    PyMem_Free(ids);
    return out;
}

/* newest's and any_set's arguments (entries, positions): the entries' items and count, the positions in
 * pos; how many positions, 0 where the Python pass decides (not a tuple or list, not 1 to MAX_POSITIONS
 * non-negative ints), -1 on an error */
static int entries_at(PyObject *args, PyObject ***items, Py_ssize_t *n, Py_ssize_t *pos) {
    PyObject *entries, *positions;
    if (!PyArg_ParseTuple(args, "OO!", &entries, &PyTuple_Type, &positions))
        return -1;
    int np = (int)PyTuple_GET_SIZE(positions);
    if (np < 1 || np > MAX_POSITIONS)
        return 0;
    for (int j = 0; j < np; j++)
        if ((pos[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, j))) < 0) {
            PyErr_Clear();
            return 0;
        }
    return entries_view(entries, items, n) ? np : 0;
}

/* an entry's field at `pos`; NULL where the entry is not a tuple that long */
static inline PyObject *field_at(PyObject *e, Py_ssize_t pos) {
    return PyTuple_Check(e) && pos < PyTuple_GET_SIZE(e) ? PyTuple_GET_ITEM(e, pos) : NULL;
}

/* newest (`any` 0: the greatest int at `positions`, 0 at least) or any_set (`any` 1: whether one is not None) */
static PyObject *over_fields(PyObject *args, int any) {
    PyObject **items;
    Py_ssize_t n, pos[MAX_POSITIONS];
    int np = entries_at(args, &items, &n, pos);
    if (np <= 0) {
        if (np < 0)
            return NULL;
        Py_RETURN_NOTIMPLEMENTED;
    }
    long long best = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        for (int j = 0; j < np; j++) {
            PyObject *v = field_at(items[i], pos[j]);
            if (!v)
                Py_RETURN_NOTIMPLEMENTED;
            if (v == Py_None)
                continue;
            if (any)
                Py_RETURN_TRUE;
            if (!PyLong_CheckExact(v))
                Py_RETURN_NOTIMPLEMENTED;
            int overflow;
            long long t = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (t == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                Py_RETURN_NOTIMPLEMENTED;
            }
            best = t > best ? t : best;
        }
    if (any)
        Py_RETURN_FALSE;
    return PyLong_FromLongLong(best);
}

static PyObject *newest(PyObject *self, PyObject *args) { return over_fields(args, 0); }

static PyObject *any_set(PyObject *self, PyObject *args) { return over_fields(args, 1); }

static PyObject *ascends(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_FORMAT))
        return NULL;
    if (b.itemsize != 8 || !b.format || strcmp(b.format, "q")) {
        PyBuffer_Release(&b);
        Py_RETURN_NOTIMPLEMENTED;
    }
    const int64_t *v = b.buf;
    Py_ssize_t n = b.len / 8, i = 1;
    while (i < n && v[i - 1] < v[i])
        i++;
    PyBuffer_Release(&b);
    return PyBool_FromLong(i >= n);
}

static PyMethodDef methods[] = {
    {"runs", runs, METH_VARARGS, "runs(entries, positions) -> [(key, count), ...] or NotImplemented"},
    {"distinct", distinct, METH_VARARGS, "distinct(entries, positions) -> the set of the runs' keys, or NotImplemented"},
    {"newest", newest, METH_VARARGS, "newest(entries, positions) -> the greatest int there (at least 0), or "
                                     "NotImplemented"},
    {"any_set", any_set, METH_VARARGS, "any_set(entries, positions) -> whether a field there is not None, or "
                                       "NotImplemented"},
    {"ascends", ascends, METH_O, "ascends(ids: array('q')) -> whether each is greater than the one before, or "
                                 "NotImplemented"},
    {"record_ids", record_ids, METH_VARARGS, "record_ids(entries, position) -> (array('q'), ascending) or "
                                             "NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_runs", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__runs(void) { return PyModule_Create(&module); }
