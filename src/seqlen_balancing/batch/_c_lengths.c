/* The compiled twin of batch.lengths._row_counts (issue 33): the non-zero entries of each
 * row of a 2-D mask, the same counts as numpy.count_nonzero row by row, in one call and
 * one pass over the mask's memory, without the GIL.
 *
 * It takes what exposes a buffer of two dimensions whose rows are contiguous and whose
 * items are bools or integers of 1, 2, 4 or 8 bytes (an item is non-zero when one of its
 * bytes is, in either byte order). Anything else (floats, whose -0.0 is zero; other
 * layouts; more rows than a count array can hold, as repeated rows of stride 0 can make)
 * answers NotImplemented, and the Python code counts (or says why it cannot).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* non-zero bytes of p[0:n]: 16 byte lanes, each adding at most 255 before they are summed */
static Py_ssize_t nonzero_bytes(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t total = 0;
    while (n >= 16) {
        Py_ssize_t groups = n / 16 < 255 ? n / 16 : 255;
        unsigned char lanes[16] = {0};
        for (Py_ssize_t g = 0; g < groups; g++, p += 16)
            for (int j = 0; j < 16; j++) lanes[j] += p[j] != 0;
        for (int j = 0; j < 16; j++) total += lanes[j];
        n -= groups * 16;
    }
    for (Py_ssize_t i = 0; i < n; i++) total += p[i] != 0;
    return total;
}

/* non-zero items of p[0:n] of sizeof(type) bytes: 16 lanes of 32 bits, the item's halves
 * or'ed first where it is wider than a lane */
#define NONZERO_WIDE(name, type, fold)                                          \
    static Py_ssize_t name(const unsigned char *p, Py_ssize_t n) {              \
        Py_ssize_t total = 0, i = 0;                                            \
        uint32_t lanes[16] = {0};                                               \
        for (; i + 16 <= n; i += 16)                                            \
            for (int j = 0; j < 16; j++) {                                      \
                type item;                                                      \
                memcpy(&item, p + (i + j) * (Py_ssize_t)sizeof(type), sizeof(type)); \
                lanes[j] += fold(item) != 0;                                    \
            }                                                                   \
        for (int j = 0; j < 16; j++) total += lanes[j];                         \
        for (; i < n; i++) {                                                    \
            type item;                                                          \
            memcpy(&item, p + i * (Py_ssize_t)sizeof(type), sizeof(type));      \
            total += item != 0;                                                 \
        }                                                                       \
        return total;                                                           \
    }
#define SAME(item) (item)
#define HALVES(item) ((uint32_t)(item) | (uint32_t)((item) >> 32))
NONZERO_WIDE(nonzero_2, uint16_t, SAME)
NONZERO_WIDE(nonzero_4, uint32_t, SAME)
NONZERO_WIDE(nonzero_8, uint64_t, HALVES)

/* the counter for view's items; NULL where the twin does not take them */
static Py_ssize_t (*counter(const Py_buffer *view))(const unsigned char *, Py_ssize_t) {
    const char *format = view->format == NULL ? "B" : view->format;
    if (format[0] != '\0' && strchr("@=<>!", format[0]) != NULL) format++; /* a byte order */
    if (format[0] == '\0' || format[1] != '\0' || strchr("?bBhHiIlLqQ", format[0]) == NULL) return NULL;
    switch (view->itemsize) {
        case 1: return nonzero_bytes;
        case 2: return nonzero_2;
        case 4: return nonzero_4;
        case 8: return nonzero_8;
        default: return NULL;
    }
}

static PyObject *row_counts(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *mask;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "O", &mask)) return NULL;
    if (PyObject_GetBuffer(mask, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t (*count)(const unsigned char *, Py_ssize_t) = counter(&view);
    if (count == NULL || view.ndim != 2 || view.suboffsets != NULL ||
        (view.shape[1] > 1 && view.strides[1] != view.itemsize)) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t rows = view.shape[0], width = view.shape[1];
    if (rows > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Py_ssize_t)) { /* (rows of stride 0) numpy says */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t *counts = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(rows > 0 ? rows : 1));
    if (counts == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++)
        counts[r] = count((const unsigned char *)view.buf + r * view.strides[0], width);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = PyList_New(rows);
    for (Py_ssize_t r = 0; result != NULL && r < rows; r++) {
        PyObject *item = PyLong_FromSsize_t(counts[r]);
        if (item == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, r, item);
    }
    PyMem_Free(counts);
    return result;
}

static PyMethodDef methods[] = {
    {"row_counts", row_counts, METH_VARARGS,
     "row_counts(mask) -> non-zero entries per row (a list of ints), or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c_lengths", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__c_lengths(void) { return PyModule_Create(&module); }
