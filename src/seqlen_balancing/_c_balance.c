/* seqlen_balancing._c_balance: the compiled twin of
 * seqlen_balancing.balance._lpt_plain_python (issue 33).
 *
 * LPT on plain sums, choice for choice as the Python code makes it: each item, in the given
 * order (costs that never grow along it), into the micro-batch of the smallest key
 * (workload, items, index) whose room is at least its size. Micro-batches too full for an
 * item wait aside, keyed by their room, until the items get small enough; an item skips
 * the micro-batches aside whose key comes before the one it takes, and the run gives up
 * (None) once the skips pass the budget, or when no micro-batch has the room.
 *
 * lpt_plain(sizes, cap, workloads, count, order, budget) returns the count micro-batches
 * (lists of items in placement order), None, or NotImplemented where the Python code must
 * decide (an input past native_ints's limits). O(n log count) plus the moves of the sorted
 * keys aside, O(count) each.
 */
#include "_c_ints.h"

#include <string.h>

typedef struct {
    int64_t *load, *items, *room;
} Bins;

/* bin a's key (workload, items, index) before bin b's */
static int key_less(const Bins *s, Py_ssize_t a, Py_ssize_t b) {
    if (s->load[a] != s->load[b]) return s->load[a] < s->load[b];
    if (s->items[a] != s->items[b]) return s->items[a] < s->items[b];
    return a < b;
}

/* by_room's order: the larger room first, then the key */
static int room_less(const Bins *s, Py_ssize_t a, Py_ssize_t b) {
    if (s->room[a] != s->room[b]) return s->room[a] > s->room[b];
    return key_less(s, a, b);
}

typedef int (*Less)(const Bins *, Py_ssize_t, Py_ssize_t);

typedef struct {
    Py_ssize_t *at, len;
} Heap;

static void sift_down(Heap *h, Py_ssize_t i, const Bins *s, Less less) {
    Py_ssize_t x = h->at[i];
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= h->len) break;
        if (child + 1 < h->len && less(s, h->at[child + 1], h->at[child])) child++;
        if (!less(s, h->at[child], x)) break;
        h->at[i] = h->at[child];
        i = child;
    }
    h->at[i] = x;
}

static void push(Heap *h, Py_ssize_t b, const Bins *s, Less less) {
    Py_ssize_t i = h->len++;
    while (i > 0 && less(s, b, h->at[(i - 1) / 2])) {
        h->at[i] = h->at[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->at[i] = b;
}

static Py_ssize_t pop(Heap *h, const Bins *s, Less less) {
    Py_ssize_t top = h->at[0];
    h->at[0] = h->at[--h->len];
    if (h->len) sift_down(h, 0, s, less);
    return top;
}

/* the first position in aside[0:len] (ascending keys) whose key is not before bin b's */
static Py_ssize_t before(const Py_ssize_t *aside, Py_ssize_t len, Py_ssize_t b, const Bins *s) {
    Py_ssize_t low = 0, high = len;
    while (low < high) {
        Py_ssize_t mid = low + (high - low) / 2;
        if (key_less(s, aside[mid], b)) low = mid + 1;
        else high = mid;
    }
    return low;
}

/* 1 where every item is placed (of[i]: the bin of order[i]), 0 where LPT gives up; heap,
 * by_room and aside have room for count bins each */
static int place(const int64_t *sizes, const int64_t *workloads, const Py_ssize_t *order, Py_ssize_t n,
                 Py_ssize_t count, int64_t budget, Bins *s, Heap *heap, Heap *by_room, Py_ssize_t *aside,
                 Py_ssize_t *of) {
    Py_ssize_t set_aside = 0;
    for (Py_ssize_t b = 0; b < count; b++) heap->at[heap->len++] = b; /* all keys (0, 0, b): a heap */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = sizes[order[i]];
        while (by_room->len && s->room[by_room->at[0]] >= size) { /* fits again: back in line */
            Py_ssize_t b = pop(by_room, s, room_less), at = before(aside, set_aside, b, s);
            memmove(&aside[at], &aside[at + 1], sizeof(Py_ssize_t) * (size_t)(set_aside - at - 1));
            set_aside--;
            push(heap, b, s, key_less);
        }
        while (heap->len && s->room[heap->at[0]] < size) {
            Py_ssize_t b = pop(heap, s, key_less), at = before(aside, set_aside, b, s);
            memmove(&aside[at + 1], &aside[at], sizeof(Py_ssize_t) * (size_t)(set_aside - at));
            aside[at] = b;
            set_aside++;
            push(by_room, b, s, room_less);
        }
        if (!heap->len) return 0;
        Py_ssize_t b = heap->at[0];
        budget -= before(aside, set_aside, b, s); /* the bins before it, all skipped */
        if (budget < 0) return 0;
        of[i] = b;
        s->room[b] -= size;
        s->load[b] += workloads[order[i]];
        s->items[b]++;
        sift_down(heap, 0, s, key_less);
    }
    return 1;
}

static PyObject *lpt_plain(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *sizes_list, *cap_object, *workloads_list, *count_object, *order_list, *budget_object;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOO", &sizes_list, &cap_object, &workloads_list, &count_object, &order_list,
                          &budget_object))
        return NULL;
    int64_t cap, budget, wanted;
    if (!PyList_CheckExact(sizes_list) || !PyList_CheckExact(order_list) || native_int(count_object, &wanted) ||
        wanted < 1 || wanted > PY_SSIZE_T_MAX / 16)
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t items = PyList_GET_SIZE(sizes_list), n = PyList_GET_SIZE(order_list), count = (Py_ssize_t)wanted;
    int refused = native_int(cap_object, &cap) || native_int(budget_object, &budget), refused_more = 0;
    int64_t *sizes = refused ? NULL : native_ints(sizes_list, items, &refused);
    int64_t *workloads = sizes == NULL ? NULL : native_ints(workloads_list, items, &refused_more);
    Py_ssize_t *order = workloads == NULL ? NULL : native_order(order_list, n, items, &refused_more);
    size_t wide = order == NULL ? 0 : (size_t)count; /* the bins' arrays: only for a run */
    Bins s = {PyMem_Calloc(wide, sizeof(int64_t)), PyMem_Calloc(wide, sizeof(int64_t)),
              PyMem_Malloc(wide * sizeof(int64_t))};
    Heap heap = {PyMem_Malloc(wide * sizeof(Py_ssize_t)), 0}, by_room = {PyMem_Malloc(wide * sizeof(Py_ssize_t)), 0};
    Py_ssize_t *aside = PyMem_Malloc(wide * sizeof(Py_ssize_t));
    Py_ssize_t *of = PyMem_Malloc(sizeof(Py_ssize_t) * (order == NULL ? 1 : (size_t)(n + 1)));
    if (refused || refused_more) {
        result = Py_NewRef(Py_NotImplemented);
    } else if (!PyErr_Occurred() && (s.load == NULL || s.items == NULL || s.room == NULL || heap.at == NULL ||
                                     by_room.at == NULL || aside == NULL || of == NULL)) {
        PyErr_NoMemory();
    } else if (!PyErr_Occurred()) {
        for (Py_ssize_t b = 0; b < count; b++) s.room[b] = cap;
        result = place(sizes, workloads, order, n, count, budget, &s, &heap, &by_room, aside, of)
                     ? native_bins(order, of, n, count)
                     : Py_NewRef(Py_None);
    }
    PyMem_Free(sizes);
    PyMem_Free(workloads);
    PyMem_Free(order);
    PyMem_Free(s.load);
    PyMem_Free(s.items);
    PyMem_Free(s.room);
    PyMem_Free(heap.at);
    PyMem_Free(by_room.at);
    PyMem_Free(aside);
    PyMem_Free(of);
    return result;
}

static PyMethodDef methods[] = {
    {"lpt_plain", lpt_plain, METH_VARARGS,
     "lpt_plain(sizes, cap, workloads, count, order, budget) -> micro-batches, None or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c_balance", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__c_balance(void) { return PyModule_Create(&module); }
