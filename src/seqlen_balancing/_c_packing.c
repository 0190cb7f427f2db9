/* seqlen_balancing._c_packing: the compiled twin of
 * seqlen_balancing.packing._best_fit_sorted_python (issue 33).
 *
 * Best fit decreasing on a sorted list of the bins' rooms, choice for choice as the Python
 * code makes it: each item in the given order goes into the bin of the smallest room at
 * least its size (of several with that room, the one that got it last), else into a new
 * bin; a bin whose room is below the last item's size leaves the list.
 *
 * best_fit_sorted(sizes, cap, order) returns the bins (lists of items in placement order),
 * or NotImplemented where the Python code must decide: an item over the cap (it raises
 * there), or an input past native_ints's limits. O(n log n) compares and O(n bins) moves.
 */
#include "_c_ints.h"

#include <string.h>

/* the first position in rooms[0:len] whose room is above (strict) or at least (!strict) x */
static Py_ssize_t search(const int64_t *rooms, Py_ssize_t len, int64_t x, int strict) {
    Py_ssize_t low = 0, high = len;
    while (low < high) {
        Py_ssize_t mid = low + (high - low) / 2;
        if (rooms[mid] < x || (strict && rooms[mid] == x)) low = mid + 1;
        else high = mid;
    }
    return low;
}

/* the bins: of[i] is the bin of order[i]; the number of bins */
static Py_ssize_t place(const int64_t *sizes, int64_t cap, const Py_ssize_t *order, Py_ssize_t n,
                        int64_t *rooms, Py_ssize_t *owners, Py_ssize_t *of) {
    Py_ssize_t len = 0, bins = 0;
    int64_t smallest = n ? sizes[order[n - 1]] : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = sizes[order[i]], left;
        Py_ssize_t pos = search(rooms, len, size, 0), owner;
        if (pos == len) {
            owner = bins++;
            left = cap - size;
        } else {
            pos = search(rooms, len, rooms[pos], 1) - 1; /* the last with this room */
            left = rooms[pos] - size;
            owner = owners[pos];
            memmove(&rooms[pos], &rooms[pos + 1], sizeof(int64_t) * (size_t)(len - pos - 1));
            memmove(&owners[pos], &owners[pos + 1], sizeof(Py_ssize_t) * (size_t)(len - pos - 1));
            len--;
        }
        of[i] = owner;
        if (left < smallest) continue; /* no item left fits it */
        pos = search(rooms, len, left, 1);
        memmove(&rooms[pos + 1], &rooms[pos], sizeof(int64_t) * (size_t)(len - pos));
        memmove(&owners[pos + 1], &owners[pos], sizeof(Py_ssize_t) * (size_t)(len - pos));
        rooms[pos] = left;
        owners[pos] = owner;
        len++;
    }
    return bins;
}

static PyObject *best_fit_sorted(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *sizes_list, *cap_object, *order_list, *result = NULL;
    if (!PyArg_ParseTuple(args, "OOO", &sizes_list, &cap_object, &order_list)) return NULL;
    if (!PyList_CheckExact(sizes_list) || !PyList_CheckExact(order_list)) Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t items = PyList_GET_SIZE(sizes_list), n = PyList_GET_SIZE(order_list);
    int64_t cap;
    int refused = native_int(cap_object, &cap), refused_order = 0;
    int64_t *sizes = refused ? NULL : native_ints(sizes_list, items, &refused);
    Py_ssize_t *order = sizes == NULL ? NULL : native_order(order_list, n, items, &refused_order);
    int64_t *rooms = order == NULL ? NULL : PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    Py_ssize_t *owners = order == NULL ? NULL : PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    Py_ssize_t *of = order == NULL ? NULL : PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    if (refused || refused_order) {
        result = Py_NewRef(Py_NotImplemented);
    } else if (!PyErr_Occurred() && (rooms == NULL || owners == NULL || of == NULL)) {
        PyErr_NoMemory();
    } else if (!PyErr_Occurred()) {
        int over = 0;
        for (Py_ssize_t i = 0; i < n; i++) over |= sizes[order[i]] > cap;
        result = over ? Py_NewRef(Py_NotImplemented)
                      : native_bins(order, of, n, place(sizes, cap, order, n, rooms, owners, of));
    }
    PyMem_Free(sizes);
    PyMem_Free(order);
    PyMem_Free(rooms);
    PyMem_Free(owners);
    PyMem_Free(of);
    return result;
}

static PyMethodDef methods[] = {
    {"best_fit_sorted", best_fit_sorted, METH_VARARGS,
     "best_fit_sorted(sizes, cap, order) -> bins, or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c_packing", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__c_packing(void) { return PyModule_Create(&module); }
