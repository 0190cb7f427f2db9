/* seqlen_balancing._c_packing: the compiled twins of best fit decreasing (issue 33):
 * seqlen_balancing.packing._best_fit_sorted_python and _best_fit_rooms_python.
 *
 * Both make the Python code's choices: each item in the given order goes into the bin of
 * the smallest room at least its size (of several with that room, the one that got it
 * last), else into a new bin; a bin whose room is below the last item's size leaves the
 * index. best_fit_sorted keeps the rooms in a sorted list (O(n log n) compares and O(n bins)
 * moves: few bins); best_fit_rooms buckets the bins by room, a stack a room, under a
 * two-level bitmap of the rooms in use (O(n + cap / 4096) word operations: many bins).
 *
 * Each returns the bins (lists of items in placement order), or NotImplemented where the
 * Python code must decide: an item over the cap (it raises there), a cap past
 * ROOMS_LIMIT (best_fit_rooms), or an input past native_ints's limits.
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

/* the arguments (sizes, cap, order) of a best fit, read into *sizes, *cap, *order and *n (the
 * order's length; the caller frees the arrays): 0 read; 1 refused (NotImplemented: not
 * plain lists of ints, a cap past cap_limit, an item over the cap); -1 an exception set */
static int read_best_fit(PyObject *args, int64_t cap_limit, int64_t **sizes, int64_t *cap, Py_ssize_t **order,
                         Py_ssize_t *n) {
    PyObject *sizes_list, *cap_object, *order_list;
    *sizes = NULL, *order = NULL;
    if (!PyArg_ParseTuple(args, "OOO", &sizes_list, &cap_object, &order_list)) return -1;
    if (!PyList_CheckExact(sizes_list) || !PyList_CheckExact(order_list)) return 1;
    Py_ssize_t items = PyList_GET_SIZE(sizes_list);
    *n = PyList_GET_SIZE(order_list);
    int refused = native_int(cap_object, cap) || *cap > cap_limit, refused_order = 0;
    *sizes = refused ? NULL : native_ints(sizes_list, items, &refused);
    *order = *sizes == NULL ? NULL : native_order(order_list, *n, items, &refused_order);
    int over = 0;
    for (Py_ssize_t i = 0; *order != NULL && i < *n; i++) over |= (*sizes)[(*order)[i]] > *cap;
    if (*order != NULL && !over) return 0;
    PyMem_Free(*sizes);
    PyMem_Free(*order);
    *sizes = NULL, *order = NULL;
    return refused || refused_order || over ? 1 : -1; /* else out of memory, its error set */
}

static PyObject *best_fit_sorted(PyObject *Py_UNUSED(self), PyObject *args) {
    int64_t *sizes, cap;
    Py_ssize_t *order, n;
    int read = read_best_fit(args, NATIVE_LIMIT, &sizes, &cap, &order, &n);
    if (read) return read < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    int64_t *rooms = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    Py_ssize_t *owners = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    Py_ssize_t *of = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    PyObject *result = rooms == NULL || owners == NULL || of == NULL
                           ? PyErr_NoMemory()
                           : native_bins(order, of, n, place(sizes, cap, order, n, rooms, owners, of));
    PyMem_Free(sizes);
    PyMem_Free(order);
    PyMem_Free(rooms);
    PyMem_Free(owners);
    PyMem_Free(of);
    return result;
}

/* the widest cap best_fit_rooms takes (packing._BITMAP_CAP): its room index holds cap + 1
 * heads */
#define ROOMS_LIMIT ((int64_t)1 << 22)

/* bins bucketed by room: head[r] is 1 + the newest bin of room r (0: none), below[b] 1 + the
 * bin under b in its room's stack; bit r & 63 of words[r >> 6] says room r has a bin, bit
 * w & 63 of used[w >> 6] that words[w] is not 0 */
typedef struct {
    Py_ssize_t *head, *below;
    uint64_t *words, *used;
    Py_ssize_t n_words, n_used;
} Rooms;

/* the smallest room at least size (at most the cap) that holds a bin; -1 where none does */
static int64_t fitting_room(const Rooms *r, int64_t size) {
    Py_ssize_t w = (Py_ssize_t)(size >> 6);
    uint64_t word = r->words[w] >> (size & 63);
    if (word) return size + __builtin_ctzll(word);
    Py_ssize_t next = w + 1, u = next >> 6;
    if (next >= r->n_words) return -1;
    uint64_t bits = r->used[u] & (~(uint64_t)0 << (next & 63));
    while (!bits) {
        if (++u >= r->n_used) return -1;
        bits = r->used[u];
    }
    w = (u << 6) + __builtin_ctzll(bits);
    return ((int64_t)w << 6) + __builtin_ctzll(r->words[w]);
}

/* the newest bin of room, taken out of the index */
static Py_ssize_t take_room(Rooms *r, int64_t room) {
    Py_ssize_t owner = r->head[room] - 1, w = (Py_ssize_t)(room >> 6);
    r->head[room] = r->below[owner];
    if (!r->head[room]) {
        r->words[w] &= ~((uint64_t)1 << (room & 63));
        if (!r->words[w]) r->used[w >> 6] &= ~((uint64_t)1 << (w & 63));
    }
    return owner;
}

/* bin owner put in the index with room */
static void give_room(Rooms *r, int64_t room, Py_ssize_t owner) {
    Py_ssize_t w = (Py_ssize_t)(room >> 6);
    r->below[owner] = r->head[room];
    r->head[room] = owner + 1;
    r->words[w] |= (uint64_t)1 << (room & 63);
    r->used[w >> 6] |= (uint64_t)1 << (w & 63);
}

/* the bins (of[i] is the bin of order[i]); the number of bins */
static Py_ssize_t place_in_rooms(const int64_t *sizes, int64_t cap, const Py_ssize_t *order, Py_ssize_t n,
                                 Rooms *r, Py_ssize_t *of) {
    Py_ssize_t bins = 0;
    int64_t smallest = n ? sizes[order[n - 1]] : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = sizes[order[i]], room = fitting_room(r, size), left;
        Py_ssize_t owner;
        if (room < 0) {
            owner = bins++;
            left = cap - size;
        } else {
            owner = take_room(r, room);
            left = room - size;
        }
        of[i] = owner;
        if (left >= smallest) give_room(r, left, owner); /* else no item left fits it */
    }
    return bins;
}

static PyObject *best_fit_rooms(PyObject *Py_UNUSED(self), PyObject *args) {
    int64_t *sizes, cap;
    Py_ssize_t *order, n;
    int read = read_best_fit(args, ROOMS_LIMIT, &sizes, &cap, &order, &n);
    if (read) return read < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    Rooms r = {NULL, NULL, NULL, NULL, (Py_ssize_t)(cap >> 6) + 1, 0};
    r.n_used = (r.n_words >> 6) + 1;
    r.head = PyMem_Calloc((size_t)cap + 1, sizeof(Py_ssize_t));
    r.below = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    r.words = PyMem_Calloc((size_t)r.n_words, sizeof(uint64_t));
    r.used = PyMem_Calloc((size_t)r.n_used, sizeof(uint64_t));
    Py_ssize_t *of = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    PyObject *result = r.head == NULL || r.below == NULL || r.words == NULL || r.used == NULL || of == NULL
                           ? PyErr_NoMemory()
                           : native_bins(order, of, n, place_in_rooms(sizes, cap, order, n, &r, of));
    PyMem_Free(sizes);
    PyMem_Free(order);
    PyMem_Free(r.head);
    PyMem_Free(r.below);
    PyMem_Free(r.words);
    PyMem_Free(r.used);
    PyMem_Free(of);
    return result;
}

static PyMethodDef methods[] = {
    {"best_fit_sorted", best_fit_sorted, METH_VARARGS,
     "best_fit_sorted(sizes, cap, order) -> bins, or NotImplemented"},
    {"best_fit_rooms", best_fit_rooms, METH_VARARGS,
     "best_fit_rooms(sizes, cap, order) -> bins, or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c_packing", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__c_packing(void) { return PyModule_Create(&module); }
