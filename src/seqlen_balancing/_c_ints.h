/* Python lists of ints read into int64 arrays, for the compiled twins (issue 33).
 *
 * A twin takes plain ints (not subclasses, not bools) from 0 below NATIVE_LIMIT (2**62)
 * only: sums of them then fit an int64.
 * Lists are plain lists (not subclasses, which may read their items otherwise), and an
 * order's items plain ints (they come back in the twin's lists) naming each item once.
 * Anything else (not a list, not an int, negative, too large, a repeated index) is refused,
 * and the twin answers NotImplemented so that the Python code decides.
 */
#ifndef SEQLEN_BALANCING_NATIVE_INTS_H
#define SEQLEN_BALANCING_NATIVE_INTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define NATIVE_LIMIT ((int64_t)1 << 62)

/* object as an int64 in [0, NATIVE_LIMIT); 1 where it is not one, a plain int (a subclass,
 * a bool, may read or compare otherwise), below 0 or from the limit up (no exception left
 * set) */
static inline int native_int(PyObject *object, int64_t *out) {
    if (!PyLong_CheckExact(object)) return 1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (overflow || v < 0 || v >= NATIVE_LIMIT) {
        PyErr_Clear();
        return 1;
    }
    *out = (int64_t)v;
    return 0;
}

/* list (of n items) as int64s in a new array whose sum stays below NATIVE_LIMIT; NULL with
 * *refused = 1 where it is not such a list, NULL with an exception set out of memory */
static inline int64_t *native_ints(PyObject *list, Py_ssize_t n, int *refused) {
    *refused = 0;
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != n) {
        *refused = 1;
        return NULL;
    }
    int64_t *values = PyMem_Malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1)), total = 0;
    if (values == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (native_int(PyList_GET_ITEM(list, i), &values[i]) || (total += values[i]) >= NATIVE_LIMIT) {
            PyMem_Free(values);
            *refused = 1;
            return NULL;
        }
    }
    return values;
}

/* order (a list of n distinct item indices below items, plain ints) as Py_ssize_t; as
 * native_ints */
static inline Py_ssize_t *native_order(PyObject *list, Py_ssize_t n, Py_ssize_t items, int *refused) {
    *refused = 0;
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != n) {
        *refused = 1;
        return NULL;
    }
    Py_ssize_t *order = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n > 0 ? n : 1));
    char *seen = PyMem_Calloc((size_t)(items > 0 ? items : 1), 1);
    if (order == NULL || seen == NULL) {
        PyMem_Free(order);
        PyMem_Free(seen);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n && !*refused; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int64_t v;
        *refused = !PyLong_CheckExact(item) || native_int(item, &v) || v >= items || seen[v];
        if (!*refused) seen[v] = 1, order[i] = (Py_ssize_t)v;
    }
    PyMem_Free(seen);
    if (*refused) {
        PyMem_Free(order);
        return NULL;
    }
    return order;
}

/* bins as lists: the items of order[0:n] (placed in that order), each in bin of[i] (-1: in
 * none), bins 0..count-1; NULL with an exception set */
static inline PyObject *native_bins(const Py_ssize_t *order, const Py_ssize_t *of, Py_ssize_t n,
                                    Py_ssize_t count) {
    Py_ssize_t *filled = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof(Py_ssize_t));
    PyObject *bins = filled == NULL ? NULL : PyList_New(count);
    if (bins == NULL) {
        PyMem_Free(filled);
        return filled == NULL ? PyErr_NoMemory() : NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (of[i] >= 0) filled[of[i]]++;
    for (Py_ssize_t b = 0; b < count; b++) {
        PyObject *bin = PyList_New(filled[b]);
        if (bin == NULL) goto fail;
        PyList_SET_ITEM(bins, b, bin);
        filled[b] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (of[i] < 0) continue;
        PyObject *item = PyLong_FromSsize_t(order[i]);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(PyList_GET_ITEM(bins, of[i]), filled[of[i]]++, item);
    }
    PyMem_Free(filled);
    return bins;
fail:
    PyMem_Free(filled);
    Py_DECREF(bins);
    return NULL;
}

#endif
