/* One rank_trace.GroupTrace's columns read in place, for the C loops of model/_rows.c and the analysis's
 * _straggler.c and _matching.c (each reads a different few of them, the same way); the bisections over an
 * int64 column; and the int64 arrays they make. */
#ifndef FREXPORT_GROUP_COLUMNS_H
#define FREXPORT_GROUP_COLUMNS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#define COLUMNS_ODD 1 /* not exactly a GroupTrace, or a column not of its kind or length: left to Python */

/* Views of n attributes of g, `names` (interned str): kinds[k] 'q' for int64 (an array 'q' or 'l' of 8-byte
 * items), 'B' for bytes; all of one length (*len). 0, COLUMNS_ODD, or -1 with an exception. *held views are
 * taken either way: the caller releases them (release_views). Only an exact `group_type` is read: a
 * subclass's attributes could run Python code. */
static inline int group_columns(PyObject *g, PyObject *group_type, int n, PyObject *const *names, const char *kinds,
                         Py_buffer *views, int *held, Py_ssize_t *len) {
    *held = 0;
    if ((PyObject *)Py_TYPE(g) != group_type)
        return COLUMNS_ODD;
    for (int k = 0; k < n; k++) {
        PyObject *col = PyObject_GetAttr(g, names[k]);
        if (col == NULL)
            return -1;
        int rc = PyObject_CheckBuffer(col) ? PyObject_GetBuffer(col, &views[k], PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) : 1;
        Py_DECREF(col); /* (the view holds it) */
        if (rc < 0)
            PyErr_Clear();
        if (rc != 0)
            return COLUMNS_ODD;
        (*held)++;
        const Py_buffer *v = &views[k];
        int ok = v->format != NULL && (kinds[k] == 'q' ? v->itemsize == 8 && (!strcmp(v->format, "q") || !strcmp(v->format, "l"))
                                                       : v->itemsize == 1 && !strcmp(v->format, "B"));
        Py_ssize_t items = v->len / (v->itemsize ? v->itemsize : 1);
        if (!ok || (k && items != *len))
            return COLUMNS_ODD;
        *len = items;
    }
    return 0;
}

static inline void release_views(Py_buffer *views, int *held) {
    for (int k = 0; k < *held; k++)
        PyBuffer_Release(&views[k]);
    *held = 0;
}

/* bisect_left and bisect_right over an int64 column (as Python's bisect reads it, sorted or not) */
static inline Py_ssize_t bisect_left_q(const int64_t *v, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static inline Py_ssize_t bisect_right_q(const int64_t *v, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (x < v[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* A new array('q') of n values (the column kind both modules hand back to Python). */
static inline PyObject *array_q(const int64_t *values, Py_ssize_t n) {
    static PyObject *array_type;
    if (array_type == NULL) {
        PyObject *mod = PyImport_ImportModule("array");
        if (mod == NULL)
            return NULL;
        array_type = PyObject_GetAttrString(mod, "array");
        Py_DECREF(mod);
        if (array_type == NULL)
            return NULL;
    }
    return PyObject_CallFunction(array_type, "sy#", "q", (const char *)values, n * 8);
}

#endif
