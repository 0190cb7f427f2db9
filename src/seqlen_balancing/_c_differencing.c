/* seqlen_balancing._c_differencing: the compiled twin of
 * seqlen_balancing.differencing._differencing_python (issue 33).
 *
 * Karmarkar-Karp's largest differencing method into k parts, made choice for choice as the
 * Python room (and verl 0.9.1) makes it, so that the partitions are identical:
 *
 *   - a part is ordered by (workload sum, number of items, index of its first item); no two
 *     parts share a first item, so no two parts are equal;
 *   - a state is its non-empty parts, largest first (missing parts are empty and smallest);
 *   - the state with the largest spread merges first: its key is (smallest part's sum, 0 for
 *     a state of fewer than k parts, less the largest's; then the larger largest part first);
 *   - the two states of smallest keys merge; the first's i-th largest part takes the
 *     second's i-th smallest, the first's part leading (its first item, its items ahead);
 *   - the final parts come largest first, each listing its items in merge order.
 *
 * With token sizes and a cap: None as soon as a joined part holds more than cap tokens.
 *
 * One entry point, differencing(values, k, equal_size, sizes, cap), returns the parts, None
 * (over the cap), or NotImplemented where the Python room must decide instead: no items,
 * k < 1, an input past _c_ints.h's limits (sums and k below 2**62, caps below 2**61), an
 * item alone over the cap. The Python room (differencing.py) falls back on NotImplemented.
 *
 * Complexity: O(n log n + n k) time, O(n + k) memory per state alive (at most n states).
 */
#include "_c_ints.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t sum, count, tokens;
    Py_ssize_t first, tail; /* the first item (its head) and the last, of a linked list */
} Part;

typedef struct {
    Part *parts; /* largest first, len of them (room for room): &one, or malloc'd (owned) */
    Py_ssize_t len, room;
    int64_t spread; /* (len == k ? smallest part's sum : 0) - largest part's sum */
    int owned;
    Part one; /* a state of one item holds its part here */
} State;

static void release(State *s) {
    if (s->owned) free(s->parts);
    s->parts = NULL;
    s->owned = 0;
}

/* room for `wanted` parts in s's array (doubling, at most `most`); -1 out of memory */
static int reserve(State *s, Py_ssize_t wanted, Py_ssize_t most) {
    if (wanted <= s->room) return 0;
    Py_ssize_t room = s->room * 2 > wanted ? s->room * 2 : wanted;
    room = room < most ? room : most;
    Part *parts = s->owned ? realloc(s->parts, sizeof(Part) * (size_t)room) : malloc(sizeof(Part) * (size_t)room);
    if (parts == NULL) return -1;
    if (!s->owned) memcpy(parts, s->parts, sizeof(Part) * (size_t)s->len);
    s->parts = parts;
    s->room = room;
    s->owned = 1;
    return 0;
}

static int part_less(const Part *a, const Part *b) {
    if (a->sum != b->sum) return a->sum < b->sum;
    if (a->count != b->count) return a->count < b->count;
    return a->first < b->first;
}

static int part_cmp_falling(const void *x, const void *y) {
    const Part *a = x, *b = y;
    return part_less(b, a) ? -1 : (part_less(a, b) ? 1 : 0);
}

/* the state that merges first: the smaller spread value, then the larger largest part */
static int state_less(const State *a, const State *b) {
    if (a->spread != b->spread) return a->spread < b->spread;
    return part_less(&b->parts[0], &a->parts[0]);
}

static void set_spread(State *s, Py_ssize_t k) {
    s->spread = (s->len == k ? s->parts[s->len - 1].sum : 0) - s->parts[0].sum;
}

typedef struct {
    State **items;
    Py_ssize_t len;
} Heap;

static void heap_push(Heap *h, State *s) {
    Py_ssize_t i = h->len++;
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!state_less(s, h->items[up])) break;
        h->items[i] = h->items[up];
        i = up;
    }
    h->items[i] = s;
}

static State *heap_pop(Heap *h) {
    State *top = h->items[0], *last = h->items[--h->len];
    Py_ssize_t i = 0, n = h->len;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && state_less(h->items[child + 1], h->items[child])) child++;
        if (!state_less(h->items[child], last)) break;
        h->items[i] = h->items[child];
        i = child;
    }
    if (n > 0) h->items[i] = last;
    return top;
}

/* parts[0:len] largest first (a few unions: insertion sort, else qsort) */
static void sort_falling(Part *parts, Py_ssize_t len) {
    if (len > 16) {
        qsort(parts, (size_t)len, sizeof(Part), part_cmp_falling);
        return;
    }
    for (Py_ssize_t i = 1; i < len; i++) {
        Part p = parts[i];
        Py_ssize_t j = i;
        for (; j > 0 && part_less(&parts[j - 1], &p); j--) parts[j] = parts[j - 1];
        parts[j] = p;
    }
}

/* The m parts `new` (largest first) into parts[0:len] (largest first, room for len + m), in
 * place: from the smallest new part up, each after a binary search, the parts below it moved
 * once. O(m log len) compares, each kept part moved at most once. */
static void insert_falling(Part *parts, Py_ssize_t len, const Part *new, Py_ssize_t m) {
    Py_ssize_t end = len; /* parts[0:end] not yet moved */
    for (Py_ssize_t j = m - 1; j >= 0; j--) {
        Py_ssize_t low = 0, high = end; /* the first of parts[0:end] below new[j] */
        while (low < high) {
            Py_ssize_t mid = low + (high - low) / 2;
            if (part_less(&new[j], &parts[mid])) low = mid + 1;
            else high = mid;
        }
        memmove(&parts[low + j + 1], &parts[low], sizeof(Part) * (size_t)(end - low));
        parts[low + j] = new[j];
        end = low;
    }
}

/* Join two states into first's place (first has the smaller key); 0, or 1 over the cap, or -1
 * out of memory. `next` links each item to the one after it in its part. `scratch` holds
 * min(n, k) parts.
 *
 * The i-th largest part of first (padded with empty parts to k) takes the i-th smallest of
 * second: only the `joined` smallest real parts of each meet a real part, first's j-th
 * smallest with second's (joined - 1 - j)-th smallest. The state with more parts keeps its
 * array: its joined parts (its smallest, at the end) leave it, and the unions and the other
 * state's parts that met an empty one go in. */
static int merge(State *first, State *second, Py_ssize_t k, Py_ssize_t *next, int capped, int64_t cap,
                 Part *scratch) {
    Py_ssize_t a = first->len, b = second->len, overlap = a + b - k, joined = overlap > 0 ? overlap : 0;
    for (Py_ssize_t j = 0; j < joined; j++) {
        Part *lead = &first->parts[a - 1 - j], *other = &second->parts[b - joined + j];
        Part u = *lead;
        u.sum += other->sum;
        u.count += other->count;
        u.tokens += other->tokens;
        next[lead->tail] = other->first;
        u.tail = other->tail;
        if (capped && u.tokens > cap) return 1;
        scratch[j] = u;
    }
    State *large = a >= b ? first : second, *small = large == first ? second : first;
    Py_ssize_t kept = small->len - joined, m = joined + kept;
    memcpy(&scratch[joined], small->parts, sizeof(Part) * (size_t)kept); /* (small's largest) */
    sort_falling(scratch, m);
    Py_ssize_t len = large->len - joined;
    if (reserve(large, len + m, k) < 0) return -1;
    insert_falling(large->parts, len, scratch, m);
    Part *parts = large->parts;
    Py_ssize_t room = large->room;
    int owned = large->owned;
    large->owned = 0; /* (its array moves to first) */
    release(small);
    release(second);
    first->parts = parts;
    first->room = room;
    first->owned = owned;
    first->len = len + m;
    set_spread(first, k);
    return 0;
}

typedef struct {
    Py_ssize_t index;
    int64_t value;
} Ranked;

/* order[0:n] (given by rising index) stably by value: ascending by (value, index). LSD radix
 * sort on bytes, a byte that every value shares skipped; O(8 n). -1 out of memory. */
static int sort_ranked(Ranked *order, Py_ssize_t n) {
    Ranked *other = malloc(sizeof(Ranked) * (size_t)n), *from = order, *to = other;
    if (other == NULL) return -1;
    for (int shift = 0; shift < 64; shift += 8) {
        Py_ssize_t count[257] = {0};
        for (Py_ssize_t i = 0; i < n; i++) count[((uint64_t)from[i].value >> shift & 255) + 1]++;
        if (count[((uint64_t)from[0].value >> shift & 255) + 1] == n) continue; /* one byte for all */
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (Py_ssize_t i = 0; i < n; i++) to[count[(uint64_t)from[i].value >> shift & 255]++] = from[i];
        Ranked *t = from;
        from = to;
        to = t;
    }
    if (from != order) memcpy(order, from, sizeof(Ranked) * (size_t)n);
    free(other);
    return 0;
}

/* the states to start from: states[0:n] without equal_size, states[0:ceil(n / k)] with it.
 * Without equal_size: one per item, in the order they merge (the largest part first, so
 * by falling value, then falling index), left out of the heap (*queued: n of them); with
 * it: the items ascending by (value, index) in runs of k, each run one state, in the heap.
 * -1 out of memory. */
static int start_states(Heap *heap, State *states, Py_ssize_t *queued, const int64_t *values,
                        const int64_t *tokens, Py_ssize_t n, Py_ssize_t k, int equal_size) {
    Ranked *order = malloc(sizeof(Ranked) * (size_t)n);
    if (order == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) order[i].index = i, order[i].value = values[i];
    if (sort_ranked(order, n) < 0) {
        free(order);
        return -1;
    }
    Py_ssize_t step = equal_size ? k : 1, made = 0;
    for (Py_ssize_t start = 0; start < n; start += step, made++) {
        Py_ssize_t len = n - start < step ? n - start : step;
        State *s = &states[made];
        s->parts = len == 1 ? &s->one : malloc(sizeof(Part) * (size_t)len);
        if (s->parts == NULL) {
            free(order);
            return -1;
        }
        s->owned = len > 1;
        s->len = s->room = len;
        for (Py_ssize_t t = 0; t < len; t++) {
            Py_ssize_t item = equal_size ? order[start + t].index : order[n - 1 - start].index;
            Part p = {values[item], 1, tokens[item], item, item};
            s->parts[t] = p;
        }
        sort_falling(s->parts, len);
        set_spread(s, k);
        if (equal_size) heap_push(heap, s);
    }
    *queued = equal_size ? 0 : n;
    free(order);
    return 0;
}

/* the state of the smallest key: the next queued one (states[*j]) or the heap's top */
static State *take(Heap *heap, State *states, Py_ssize_t *j, Py_ssize_t queued) {
    if (*j < queued && (heap->len == 0 || state_less(&states[*j], heap->items[0]))) return &states[(*j)++];
    return heap_pop(heap);
}

/* the final state's parts, largest first, each its items in merge order; empties to k */
static PyObject *parts_list(const State *last, const Py_ssize_t *next, Py_ssize_t k) {
    PyObject *result = PyList_New(k);
    if (result == NULL) return NULL;
    for (Py_ssize_t p = 0; p < k; p++) {
        PyObject *items;
        if (p < last->len) {
            const Part *part = &last->parts[p];
            items = PyList_New(part->count);
            if (items == NULL) goto fail;
            Py_ssize_t item = part->first;
            for (Py_ssize_t c = 0; c < part->count; c++, item = next[item]) {
                PyObject *index = PyLong_FromSsize_t(item);
                if (index == NULL) {
                    Py_DECREF(items);
                    goto fail;
                }
                PyList_SET_ITEM(items, c, index);
            }
        } else {
            items = PyList_New(0);
            if (items == NULL) goto fail;
        }
        PyList_SET_ITEM(result, p, items);
    }
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

/* the merges to one state; the parts, None over the cap, NULL with an exception set */
static PyObject *run(const int64_t *values, const int64_t *tokens, Py_ssize_t n, Py_ssize_t k,
                     int equal_size, int capped, int64_t cap) {
    PyObject *result = NULL;
    State *states = calloc((size_t)n, sizeof(State));
    Heap heap = {malloc(sizeof(State *) * (size_t)n), 0};
    Py_ssize_t *next = malloc(sizeof(Py_ssize_t) * (size_t)n), queued = 0, j = 0;
    Part *scratch = malloc(sizeof(Part) * (size_t)(k < n ? k : n)); /* new parts per merge, at most */
    if (states == NULL || heap.items == NULL || next == NULL || scratch == NULL ||
        start_states(&heap, states, &queued, values, tokens, n, k, equal_size) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    while (heap.len + queued - j > 1) {
        State *first = take(&heap, states, &j, queued), *second = take(&heap, states, &j, queued);
        int status = merge(first, second, k, next, capped, cap, scratch);
        if (status < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (status > 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        heap_push(&heap, first);
    }
    result = parts_list(heap.len ? heap.items[0] : &states[j], next, k);
done:
    if (states != NULL)
        for (Py_ssize_t i = 0; i < n; i++) release(&states[i]);
    free(states);
    free(heap.items);
    free(next);
    free(scratch);
    return result;
}

static PyObject *differencing(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *values_list, *k_object, *sizes_list, *cap_object, *result = NULL;
    int equal_size;
    if (!PyArg_ParseTuple(args, "OOpOO", &values_list, &k_object, &equal_size, &sizes_list, &cap_object))
        return NULL;
    int capped = sizes_list != Py_None;
    int64_t k = 0, cap = 0;
    int refused = !PyList_CheckExact(values_list) || native_int(k_object, &k) || k < 1 ||
              (capped && (native_int(cap_object, &cap) || cap >= NATIVE_LIMIT / 2));
    Py_ssize_t n = refused ? 0 : PyList_GET_SIZE(values_list);
    int64_t *values = refused || n == 0 ? NULL : native_ints(values_list, n, &refused);
    int64_t *tokens = values == NULL ? NULL : capped ? native_ints(sizes_list, n, &refused)
                                                     : PyMem_Calloc((size_t)n, sizeof(int64_t));
    for (Py_ssize_t i = 0; tokens != NULL && capped && i < n; i++) refused |= tokens[i] > cap; /* alone over */
    if (refused || n == 0) {
        result = Py_NewRef(Py_NotImplemented); /* the Python code decides */
    } else if (!PyErr_Occurred() && tokens == NULL) {
        PyErr_NoMemory();
    } else if (!PyErr_Occurred()) {
        result = run(values, tokens, n, (Py_ssize_t)k, equal_size, capped, cap);
    }
    PyMem_Free(values);
    PyMem_Free(tokens);
    return result;
}

static PyMethodDef methods[] = {
    {"differencing", differencing, METH_VARARGS,
     "differencing(values, k, equal_size, sizes, cap) -> parts, None (over the cap) or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_c_differencing", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__c_differencing(void) { return PyModule_Create(&module); }
