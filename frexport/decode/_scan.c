/* The compiled scanner of a Flight Recorder pickle (frexport.decode._scan). JSON has one decoder of
 * its own (json_decode.py, msgspec).
 *
 * scan(data: bytes) -> tuple | None
 *
 * Walks the pickle opcode stream of one dump once, with a small value stack and the memo, into C
 * values (no Python object per int, per container, per frame dict), then reads the dump's entries
 * into columns (see docs/performance.md, "The compiled scanner"):
 *
 *   (head, kinds, kind_of, ints, durations, stacks, frames, threads)
 *   head       the top-level dict as plain Python data, "entries" replaced by []
 *   kinds      list of (pg_name, pg_desc, pg_id, is_p2p, profiling_name, state, retired,
 *              input_sizes, output_sizes, input_dtypes, output_dtypes, stack, timeout_ms): the
 *              distinct categorical parts of the entries; sizes are tuples of tuples, dtypes tuples
 *              of str, stack an index into stacks or -1 (no frames), timeout_ms an int or None
 *   kind_of    bytes, one native int32 per entry: its kind
 *   ints       bytes, eight native int64 per entry: collective_seq_id, p2p_seq_id, time_created_ns,
 *              time_discovered_started_ns, time_discovered_completed_ns (0 where PyTorch wrote None),
 *              record_id, op_id, and its thread: an index into threads
 *   durations  bytes, one native double per entry: duration_ms as fields.duration_ms reads it, NaN = None
 *   stacks     list of tuples of frame indices (at most fields.MAX_FRAMES, innermost first)
 *   frames     list of (name, filename, line), or None for a frame that is not a well-formed dict
 *   threads    list of the distinct (thread_id, thread_name)
 *
 * Safety: only an allow-list of plain-data opcodes is understood (PROTO 2-5, FRAME, STOP, MARK,
 * NONE, NEWTRUE, NEWFALSE, BININT*, LONG1 up to 8 bytes, BINFLOAT, *BINUNICODE*, EMPTY_LIST/DICT/
 * TUPLE, TUPLE*, APPEND(S), SETITEM(S), BINGET, LONG_BINGET, BINPUT, LONG_BINPUT, MEMOIZE). Any
 * other byte - every opcode safe_pickle refuses (GLOBAL, REDUCE, BUILD, ...) among them - makes
 * scan return None, and so does anything it does not reason about (a shape outside the common 2.10
 * layout, a stack underflow, a memo index past the input, a key that is a container, an int over
 * 64 bits, a cycle). None means: the caller decodes with the pure-Python path (safe_pickle, which
 * refuses or explains), so this scanner can only ever accept less than that path, never more.
 * Nothing here calls Python code named by the data; every read is bounds-checked against the input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The field rules' constants (MAX_ENTRIES, MAX_FRAMES, MAX_SIZE_ELEMENTS, MAX_DTYPES, MAX_DTYPE_LEN,
 * MAX_DURATION_MS), the entry fields (F_*, FIELD_NAMES) and the frame keys: generated from
 * frexport/decode/fields.py by scripts/gen_scan_fields.py, never written here. */
#include "_scan_fields.h"

#define N_INTS 8 /* numbers per entry in `ints` (scanned.N_INTS) */
#define MAX_DEPTH 100 /* nesting of the head's plain data (materialize), the scanner's own bound */
#define KEY_ORDER 32 /* an entry's key positions whose field is remembered (PyTorch writes ~20 keys) */

enum { T_NONE, T_BOOL, T_INT, T_FLOAT, T_STR, T_LIST, T_TUPLE, T_DICT };

typedef struct {
    uint8_t t;
    union {
        int64_t i;
        double f;
        PyObject *s; /* borrowed: owned by the scan's canonical-string dict */
        uint32_t node;
    } u;
} Val;

/* a container: its items are pool[start:start+len] (dicts: key, value, key, value, ...); a node that
 * outgrows its room moves to the pool's end with twice the room, so the pool stays within ~4x the
 * items and no container needs an allocation of its own */
typedef struct {
    size_t start;
    uint32_t len, cap;
} Node;

typedef struct { PyObject *name, *filename; int64_t line; int32_t index; } FrameSlot;

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
    PyObject *canon; /* str -> the one str object of that value in this dump */
    uint32_t n_nodes;
    size_t n_pool, sp, n_marks, fence, memo_len;
    /* phase 2 */
    PyObject *keys[N_FIELDS];
    PyObject *k_name, *k_filename, *k_line, *k_entries, *empty;
    FrameSlot *fslots;
    size_t fslot_cap;
    PyObject *frames, *stacks, *stack_ids, *kinds, *kind_ids, *threads, *thread_ids;
    PyObject *last_tid, *last_tname; /* the thread of the last entry read, and its index */
    Py_ssize_t last_thread;
    Py_ssize_t last_kind, last_key_len; /* the kind of the last entry read, and its key's length (last_key) */
    int32_t invalid_frame;
    int phase2;
    /* per key position of an entry: the key seen there last (canonical: the same str is the same
     * pointer within a scan) and its field, -1 for none (read_entry) */
    PyObject *order_key[KEY_ORDER];
    int8_t order_field[KEY_ORDER];
} Scan;

/* Scratch arrays, kept from one call to the next (a decoder scans thousands of dumps: growing them
 * anew each time was mostly page faults). Only touched with the GIL held, and scan calls no Python
 * code that could call scan again. Over SCRATCH_KEEP bytes they are given back after the call. */
#define SCRATCH_KEEP ((size_t)64 << 20)
static Node *nodes;
static size_t cap_nodes;
static Val *pool, *stack, *memo;
static size_t cap_pool, cap_stack, cap_memo;
static size_t *marks;
static size_t cap_marks;
static PyObject **materialized; /* per node, for the head */
static size_t cap_materialized;
static int32_t *node_frame, *node_stack;
static size_t cap_node_frame, cap_node_stack;
static int64_t *keybuf;
static size_t keycap;
static int64_t *last_key; /* a copy of the last entry's kind key: entries come in runs of one kind */
static size_t last_key_cap;
#define T_UNSET 255 /* a memo slot never written */

/* ------------------------------------------------------------------------------------------------ */
/* growth helpers: every size is bounded by the input length, checked by the callers */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > ((size_t)1 << 40) / elem) return -1;
        n *= 2;
    }
    void *q = PyMem_Realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* The next slot of the value stack (grown where full), NULL if it cannot grow. Its value is written in
 * place, field by field (PUT): a Val built aside and then copied in was two small stores read back at
 * once as one 16-byte load, which the CPU cannot forward from its store buffer: a stall on most values
 * (a tenth of a scan's time, measured). */
static inline Val *slot(Scan *s) {
    if (s->sp >= cap_stack && grow((void **)&stack, &cap_stack, s->sp + 1, sizeof(Val))) return NULL;
    return &stack[s->sp++];
}

#define PUT(type, member, value) do { \
        Val *slot_ = slot(s); \
        if (!slot_) return -1; \
        slot_->t = (type); \
        slot_->u.member = (value); \
    } while (0)

static int new_node(Scan *s, uint8_t t, Val *out) {
    if (s->n_nodes == UINT32_MAX - 1) return -1;
    if (s->n_nodes >= cap_nodes && grow((void **)&nodes, &cap_nodes, (size_t)s->n_nodes + 1, sizeof(Node))) return -1;
    Node *n = &nodes[s->n_nodes];
    n->start = n->len = n->cap = 0;
    out->t = t;
    out->u.node = s->n_nodes++;
    return 0;
}

#define ITEMS(n) (pool + (n)->start)

static int node_add(Scan *s, Node *n, const Val *v, size_t count) {
    size_t len = (size_t)n->len + count;
    if (len >= UINT32_MAX / 2) return -1;
    if (len > n->cap) {
        if (n->start + n->cap == s->n_pool) { /* the newest node: grow in place */
            s->n_pool = n->start;
        } else if (n->len == 0) {
            n->start = s->n_pool;
        }
        /* a container's first add is usually all of it (one SETITEMS, APPENDS or TUPLE): exactly
         * that room; one that grows item by item (APPEND) doubles */
        size_t room = n->len == 0 && count > 1 ? len : len < 4 ? 4 : len * 2;
        if (grow((void **)&pool, &cap_pool, s->n_pool + room, sizeof(Val))) return -1;
        if (n->start != s->n_pool) {
            memmove(pool + s->n_pool, pool + n->start, n->len * sizeof(Val));
            n->start = s->n_pool;
        }
        n->cap = (uint32_t)room;
        s->n_pool += room;
    }
    memcpy(pool + n->start + n->len, v, count * sizeof(Val));
    n->len = (uint32_t)len;
    return 0;
}

static PyObject *canonical(Scan *s, PyObject *str) { /* steals str; returns a borrowed reference */
    if (!str) return NULL;
    PyObject *c = PyDict_SetDefault(s->canon, str, str);
    Py_DECREF(str);
    return c;
}

static size_t memo_used; /* slots of memo[] that may be set: cleared before each scan */

static int memo_put(Scan *s, size_t idx, Val v) {
    /* a memo index must be one some earlier byte could have made: bounds the memo by the input */
    if (idx > (size_t)s->size) return -1;
    if (idx >= memo_used) {
        if (grow((void **)&memo, &cap_memo, idx + 1, sizeof(Val))) return -1;
        for (size_t i = memo_used; i <= idx; i++) memo[i].t = T_UNSET;
        memo_used = idx + 1;
    }
    if (memo[idx].t == T_UNSET) s->memo_len++;
    memo[idx] = v;
    return 0;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ------------------------------------------------------------------------------------------------ */
/* phase 1: the opcode stream to C values. Returns 0 and the root, or -1 (not for us). */

#define NEED(n) do { if ((uint64_t)(end - p) < (uint64_t)(n)) return -1; } while (0)

static int pop_mark(Scan *s, size_t *x) {
    if (!s->n_marks) return -1;
    *x = marks[--s->n_marks];
    s->fence = s->n_marks ? marks[s->n_marks - 1] : 0;
    return 0;
}

static int parse(Scan *s, Val *root) {
    const unsigned char *p = s->data, *end = s->data + s->size;
    NEED(2);
    if (p[0] != 0x80 || p[1] < 2 || p[1] > 5) return -1; /* PROTO 2-5 first, as PyTorch and pickle write */
    p += 2;
    for (;;) {
        NEED(1);
        unsigned char op = *p++;
        switch (op) {
        case '(': /* MARK */
            if (grow((void **)&marks, &cap_marks, s->n_marks + 1, sizeof(size_t))) return -1;
            marks[s->n_marks++] = s->sp;
            s->fence = s->sp;
            break;
        case '.': /* STOP */
            if (s->n_marks || s->sp != 1) return -1;
            *root = stack[0];
            return 0;
        case 'N': PUT(T_NONE, i, 0); break;
        case 0x88: PUT(T_BOOL, i, 1); break;
        case 0x89: PUT(T_BOOL, i, 0); break;
        case 'J': NEED(4); PUT(T_INT, i, (int32_t)(uint32_t)le(p, 4)); p += 4; break;
        case 'K': NEED(1); PUT(T_INT, i, p[0]); p += 1; break;
        case 'M': NEED(2); PUT(T_INT, i, (int64_t)le(p, 2)); p += 2; break;
        case 0x8a: { /* LONG1: little-endian two's complement, at most 8 bytes here */
            NEED(1);
            int n = p[0];
            p++;
            if (n > 8) return -1;
            NEED(n);
            uint64_t u = le(p, n);
            if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
            p += n;
            int64_t i;
            memcpy(&i, &u, 8);
            PUT(T_INT, i, i);
            break;
        }
        case 'G': { /* BINFLOAT: big-endian IEEE 754 double */
            NEED(8);
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = (u << 8) | p[i];
            p += 8;
            double f;
            memcpy(&f, &u, 8);
            PUT(T_FLOAT, f, f);
            break;
        }
        case 0x8c: case 'X': case 0x8d: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
            int w = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
            NEED(w);
            uint64_t n = le(p, w);
            p += w;
            NEED(n);
            /* the C unpickler decodes with "surrogatepass": lone surrogates are valid here too */
            PyObject *str = canonical(s, PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "surrogatepass"));
            if (!str) return -1;
            p += n;
            PUT(T_STR, s, str);
            break;
        }
        case ']': { Val *d = slot(s); if (!d || new_node(s, T_LIST, d)) return -1; break; }
        case '}': { Val *d = slot(s); if (!d || new_node(s, T_DICT, d)) return -1; break; }
        case ')': { Val *d = slot(s); if (!d || new_node(s, T_TUPLE, d)) return -1; break; }
        case 't': case 0x85: case 0x86: case 0x87: { /* TUPLE, TUPLE1-3 */
            size_t start;
            if (op == 't') {
                if (pop_mark(s, &start)) return -1;
                if (start < s->fence || start > s->sp) return -1;
            } else {
                size_t k = op - 0x84;
                if (s->sp < s->fence + k) return -1;
                start = s->sp - k;
            }
            Val v;
            if (new_node(s, T_TUPLE, &v)) return -1;
            if (node_add(s, &nodes[v.u.node], stack + start, s->sp - start)) return -1;
            s->sp = start;
            PUT(T_TUPLE, node, v.u.node);
            break;
        }
        case 'a': case 'e': case 's': case 'u': { /* APPEND, APPENDS, SETITEM, SETITEMS */
            size_t x;
            if (op == 'a') {
                if (s->sp < 1) return -1;
                x = s->sp - 1;
            } else if (op == 's') {
                if (s->sp < 2) return -1;
                x = s->sp - 2;
            } else if (pop_mark(s, &x)) {
                return -1;
            }
            /* CPython's fence rule: the container must sit above the innermost open mark */
            if (x > s->sp || x <= s->fence) return -1;
            Val target = stack[x - 1];
            size_t count = s->sp - x;
            if (op == 'a' || op == 'e') {
                if (target.t != T_LIST) return -1;
            } else {
                if (target.t != T_DICT || count % 2) return -1;
                for (size_t i = x; i < s->sp; i += 2) /* keys: scalars only (a container may be unhashable) */
                    if (stack[i].t > T_STR) return -1;
            }
            if (count && node_add(s, &nodes[target.u.node], stack + x, count)) return -1;
            s->sp = x;
            break;
        }
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int w = op == 'h' ? 1 : 4;
            NEED(w);
            size_t idx = (size_t)le(p, w);
            p += w;
            if (idx >= memo_used || memo[idx].t == T_UNSET) return -1;
            { Val *d = slot(s); if (!d) return -1; *d = memo[idx]; }
            break;
        }
        case 'q': case 'r': { /* BINPUT, LONG_BINPUT */
            int w = op == 'q' ? 1 : 4;
            NEED(w);
            size_t idx = (size_t)le(p, w);
            p += w;
            if (s->sp <= s->fence) return -1;
            if (memo_put(s, idx, stack[s->sp - 1])) return -1;
            break;
        }
        case 0x94: /* MEMOIZE: the next index is the number of memo slots in use, as in CPython */
            if (s->sp <= s->fence) return -1;
            if (memo_put(s, s->memo_len, stack[s->sp - 1])) return -1;
            break;
        case 0x95: { /* FRAME: only a length; the data must be there */
            NEED(8);
            uint64_t n = le(p, 8);
            p += 8;
            NEED(n);
            break;
        }
        default:
            return -1; /* every other opcode, the refused ones included: not for this scanner */
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* phase 2: the head as Python data, the entries as columns */

static PyObject *materialize(Scan *s, Val v, int depth) {
    switch (v.t) {
    case T_NONE: Py_RETURN_NONE;
    case T_BOOL: return PyBool_FromLong((long)v.u.i);
    case T_INT: return PyLong_FromLongLong(v.u.i);
    case T_FLOAT: return PyFloat_FromDouble(v.u.f);
    case T_STR: Py_INCREF(v.u.s); return v.u.s;
    default: break;
    }
    if (depth > MAX_DEPTH) return NULL;
    PyObject **slot = &materialized[v.u.node];
    if (*slot == Py_None) return NULL; /* a cycle: in progress */
    if (*slot) { Py_INCREF(*slot); return *slot; }
    *slot = Py_None;
    Node *n = &nodes[v.u.node];
    Val *items = ITEMS(n);
    PyObject *out = NULL;
    if (v.t == T_DICT) {
        out = PyDict_New();
        for (uint32_t i = 0; out && i < n->len; i += 2) {
            PyObject *k = materialize(s, items[i], depth + 1);
            /* the entries are read as columns, not as objects (scan's caller puts [] there too) */
            PyObject *val = k && depth == 0 && k == s->k_entries ? PyList_New(0)
                                                                  : materialize(s, items[i + 1], depth + 1);
            if (!k || !val || PyDict_SetItem(out, k, val)) Py_CLEAR(out);
            Py_XDECREF(k);
            Py_XDECREF(val);
        }
    } else {
        out = v.t == T_LIST ? PyList_New(n->len) : PyTuple_New(n->len);
        for (uint32_t i = 0; out && i < n->len; i++) {
            PyObject *item = materialize(s, items[i], depth + 1);
            if (!item) { Py_CLEAR(out); break; }
            if (v.t == T_LIST) PyList_SET_ITEM(out, i, item); else PyTuple_SET_ITEM(out, i, item);
        }
    }
    *slot = out;
    Py_XINCREF(out);
    return out;
}

static int key_room(Scan *s, size_t need) {
    return grow((void **)&keybuf, &keycap, need, sizeof(int64_t));
}

/* index of a Python object in `table` by the value of `key` (a bytes object, stolen); appends
 * make() on a miss. Returns -1 on error. */
static Py_ssize_t intern_key(PyObject *index, PyObject *table, PyObject *key, PyObject *(*make)(Scan *, void *),
                             Scan *s, void *arg) {
    if (!key) return -1;
    PyObject *hit = PyDict_GetItemWithError(index, key);
    if (hit) { Py_DECREF(key); return PyLong_AsSsize_t(hit); }
    if (PyErr_Occurred()) { Py_DECREF(key); return -1; }
    PyObject *obj = make(s, arg);
    Py_ssize_t i = PyList_GET_SIZE(table);
    PyObject *num = obj ? PyLong_FromSsize_t(i) : NULL;
    int bad = !num || PyList_Append(table, obj) || PyDict_SetItem(index, key, num);
    Py_XDECREF(obj);
    Py_XDECREF(num);
    Py_DECREF(key);
    return bad ? -1 : i;
}

static Val *dict_get(Scan *s, Node *n, PyObject *key) { /* last value wins, as in a dict */
    Val *hit = NULL, *items = ITEMS(n);
    for (uint32_t i = 0; i < n->len; i += 2)
        if (items[i].t == T_STR && items[i].u.s == key) hit = &items[i + 1];
    return hit;
}

/* frames: (name, filename, line) by value; a frame that fields.Caches.frame_of refuses is `invalid` */
static int32_t frame_index(Scan *s, Val f) {
    if (f.t != T_DICT) goto invalid;
    int32_t *cached = &node_frame[f.u.node];
    if (*cached >= 0) return *cached;
    Node *n = &nodes[f.u.node];
    Val *name = dict_get(s, n, s->k_name), *file = dict_get(s, n, s->k_filename), *line = dict_get(s, n, s->k_line);
    if ((name && name->t != T_STR) || (file && file->t != T_STR) || (line && line->t != T_INT)) goto invalid;
    PyObject *nm = name ? name->u.s : s->empty, *fn = file ? file->u.s : s->empty;
    int64_t ln = line ? line->u.i : 0;
    /* open addressing on (name, filename, line): canonical strings compare by address */
    uint64_t h = ((uint64_t)(uintptr_t)nm * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(uintptr_t)fn * 0xC2B2AE3D27D4EB4Full)
                 ^ ((uint64_t)ln * 0x165667B19E3779F9ull);
    if (PyList_GET_SIZE(s->frames) * 2 + 2 > (Py_ssize_t)s->fslot_cap) { /* rehash at half full */
        size_t cap = s->fslot_cap ? s->fslot_cap * 2 : 1024;
        FrameSlot *t = PyMem_Calloc(cap, sizeof(FrameSlot));
        if (!t) return -2;
        for (size_t i = 0; i < s->fslot_cap; i++) {
            FrameSlot *o = &s->fslots[i];
            if (!o->name) continue;
            uint64_t hh = ((uint64_t)(uintptr_t)o->name * 0x9E3779B97F4A7C15ull)
                          ^ ((uint64_t)(uintptr_t)o->filename * 0xC2B2AE3D27D4EB4Full)
                          ^ ((uint64_t)o->line * 0x165667B19E3779F9ull);
            size_t j = (hh >> 17) & (cap - 1);
            while (t[j].name) j = (j + 1) & (cap - 1);
            t[j] = *o;
        }
        PyMem_Free(s->fslots);
        s->fslots = t;
        s->fslot_cap = cap;
    }
    size_t j = (h >> 17) & (s->fslot_cap - 1);
    while (s->fslots[j].name) {
        FrameSlot *o = &s->fslots[j];
        if (o->name == nm && o->filename == fn && o->line == ln) return *cached = o->index;
        j = (j + 1) & (s->fslot_cap - 1);
    }
    PyObject *tup = Py_BuildValue("(OOL)", nm, fn, (long long)ln);
    if (!tup) return -2;
    int32_t index = (int32_t)PyList_GET_SIZE(s->frames);
    int bad = PyList_Append(s->frames, tup);
    Py_DECREF(tup);
    if (bad) return -2;
    s->fslots[j] = (FrameSlot){nm, fn, ln, index};
    return *cached = index;
invalid:
    if (s->invalid_frame < 0) {
        s->invalid_frame = (int32_t)PyList_GET_SIZE(s->frames);
        if (PyList_Append(s->frames, Py_None)) return -2;
    }
    return s->invalid_frame;
}

typedef struct { int32_t *ids; size_t n; } StackArg;

static PyObject *make_stack(Scan *s, void *arg) {
    StackArg *a = arg;
    PyObject *t = PyTuple_New((Py_ssize_t)a->n);
    for (size_t i = 0; t && i < a->n; i++) {
        PyObject *x = PyLong_FromLong(a->ids[i]);
        if (!x) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* -1: no frames (a falsy value); -2: not for us; -3: error; else the stack's index */
static Py_ssize_t stack_index(Scan *s, Val *fv) {
    if (!fv) return -1;
    switch (fv->t) {
    case T_NONE: return -1;
    case T_BOOL: case T_INT: return fv->u.i ? -2 : -1;
    case T_FLOAT: return fv->u.f != 0.0 ? -2 : -1;
    case T_STR: return PyUnicode_GET_LENGTH(fv->u.s) ? -2 : -1;
    default: break;
    }
    Node *n = &nodes[fv->u.node];
    if (!n->len) return -1;
    if (fv->t == T_DICT) return -2;
    int32_t *cached = &node_stack[fv->u.node];
    if (*cached >= 0) return *cached;
    size_t count = n->len < MAX_FRAMES ? n->len : MAX_FRAMES;
    int32_t ids[MAX_FRAMES];
    for (size_t i = 0; i < count; i++) {
        int32_t f = frame_index(s, ITEMS(n)[i]);
        if (f < 0) return -3;
        ids[i] = f;
    }
    StackArg a = {ids, count};
    Py_ssize_t i = intern_key(s->stack_ids, s->stacks,
                              PyBytes_FromStringAndSize((const char *)ids, (Py_ssize_t)(count * sizeof(int32_t))),
                              make_stack, s, &a);
    if (i < 0) return -3;
    return *cached = (int32_t)i;
}

/* sizes (list of shapes) into the key buffer: count, then per shape its length and dims.
 * Returns the next position, or -1 when fields.sizes would refuse it (or it is not for us). */
static Py_ssize_t put_sizes(Scan *s, size_t pos, Val *v) {
    if (v->t == T_NONE) { if (key_room(s, pos + 1)) return -1; keybuf[pos] = 0; return pos + 1; }
    if (v->t != T_LIST && v->t != T_TUPLE) return -1;
    Node *n = &nodes[v->u.node];
    if (n->len > MAX_SIZE_ELEMENTS) return -1;
    size_t total = 0;
    if (key_room(s, pos + 1 + n->len)) return -1;
    keybuf[pos++] = n->len;
    for (uint32_t i = 0; i < n->len; i++) {
        Val *shape = &ITEMS(n)[i];
        if (shape->t != T_LIST && shape->t != T_TUPLE) return -1;
        Node *sh = &nodes[shape->u.node];
        Val *dims = ITEMS(sh);
        total += sh->len;
        if (total > MAX_SIZE_ELEMENTS) return -1;
        if (key_room(s, pos + 1 + sh->len + (n->len - i))) return -1;
        keybuf[pos++] = sh->len;
        for (uint32_t k = 0; k < sh->len; k++) {
            if (dims[k].t != T_INT || dims[k].u.i < 0) return -1;
            keybuf[pos++] = dims[k].u.i;
        }
    }
    return pos;
}

static Py_ssize_t put_dtypes(Scan *s, size_t pos, Val *v) {
    if (v->t == T_NONE) { if (key_room(s, pos + 1)) return -1; keybuf[pos] = 0; return pos + 1; }
    if (v->t != T_LIST && v->t != T_TUPLE) return -1;
    Node *n = &nodes[v->u.node];
    if (n->len > MAX_DTYPES || key_room(s, pos + 1 + n->len)) return -1;
    keybuf[pos++] = n->len;
    for (uint32_t i = 0; i < n->len; i++) {
        Val *d = &ITEMS(n)[i];
        if (d->t != T_STR || PyUnicode_GET_LENGTH(d->u.s) >= MAX_DTYPE_LEN) return -1;
        keybuf[pos++] = (int64_t)(uintptr_t)d->u.s;
    }
    return pos;
}

static PyObject *sizes_obj(Scan *s, Val *v) {
    if (v->t == T_NONE) return PyTuple_New(0);
    Node *n = &nodes[v->u.node];
    PyObject *out = PyTuple_New(n->len);
    for (uint32_t i = 0; out && i < n->len; i++) {
        Node *sh = &nodes[ITEMS(n)[i].u.node];
        PyObject *t = PyTuple_New(sh->len);
        for (uint32_t k = 0; t && k < sh->len; k++) {
            PyObject *d = PyLong_FromLongLong(ITEMS(sh)[k].u.i);
            if (!d) { Py_CLEAR(t); break; }
            PyTuple_SET_ITEM(t, k, d);
        }
        if (!t) { Py_CLEAR(out); break; }
        PyTuple_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *dtypes_obj(Scan *s, Val *v) {
    if (v->t == T_NONE) return PyTuple_New(0);
    Node *n = &nodes[v->u.node];
    PyObject *out = PyTuple_New(n->len);
    for (uint32_t i = 0; out && i < n->len; i++) {
        Py_INCREF(ITEMS(n)[i].u.s);
        PyTuple_SET_ITEM(out, i, ITEMS(n)[i].u.s);
    }
    return out;
}

typedef struct { Val **f; PyObject *pg_name, *pg_desc; Py_ssize_t stack; } KindArg;

static PyObject *make_kind(Scan *s, void *arg) {
    KindArg *a = arg;
    Val **f = a->f;
    PyObject *in_s = sizes_obj(s, f[F_IN_SIZES]), *out_s = sizes_obj(s, f[F_OUT_SIZES]);
    PyObject *in_d = dtypes_obj(s, f[F_IN_DTYPES]), *out_d = dtypes_obj(s, f[F_OUT_DTYPES]);
    PyObject *timeout = f[F_TIMEOUT]->t == T_INT ? PyLong_FromLongLong(f[F_TIMEOUT]->u.i) : Py_NewRef(Py_None);
    PyObject *k = NULL;
    if (in_s && out_s && in_d && out_d && timeout)
        k = Py_BuildValue("(OOLOOOOOOOOnO)", a->pg_name, a->pg_desc, (long long)f[F_PG_ID]->u.i,
                          f[F_IS_P2P]->u.i ? Py_True : Py_False, f[F_PNAME]->u.s, f[F_STATE]->u.s,
                          f[F_RETIRED]->u.i ? Py_True : Py_False, in_s, out_s, in_d, out_d, a->stack, timeout);
    Py_XDECREF(timeout);
    Py_XDECREF(in_s);
    Py_XDECREF(out_s);
    Py_XDECREF(in_d);
    Py_XDECREF(out_d);
    return k;
}

static PyObject *make_thread(Scan *s, void *arg) {
    PyObject **pair = arg;
    return PyTuple_Pack(2, pair[0], pair[1]);
}

/* the index of (thread_id, thread_name) in s->threads: entries repeat their thread, so the last one is
 * kept; -1 on error */
static Py_ssize_t thread_index(Scan *s, PyObject *tid, PyObject *tname) {
    if (tid == s->last_tid && tname == s->last_tname) return s->last_thread;
    int64_t key[2] = {(int64_t)(uintptr_t)tid, (int64_t)(uintptr_t)tname};
    PyObject *pair[2] = {tid, tname};
    Py_ssize_t i = intern_key(s->thread_ids, s->threads, PyBytes_FromStringAndSize((const char *)key, sizeof key),
                              make_thread, s, pair);
    if (i >= 0) { s->last_tid = tid; s->last_tname = tname; s->last_thread = i; }
    return i;
}

/* one entry: its kind index, or -1 (not for us), -3 (error); its N_INTS numbers into ints */
static Py_ssize_t read_entry(Scan *s, Val e, int64_t *ints, double *duration) {
    if (e.t != T_DICT) return -1;
    Node *n = &nodes[e.u.node];
    Val *f[N_FIELDS] = {0}, *items = ITEMS(n);
    for (uint32_t i = 0; i < n->len; i += 2) {
        Val *k = &items[i];
        if (k->t != T_STR) continue; /* only str keys can equal the field names */
        /* entries repeat their key order (PyTorch's, not FIELD_NAMES'): the field a key position held
         * in the last entry is the one tried first; looked up among all only where the key differs */
        uint32_t at = i / 2;
        int j;
        if (at < KEY_ORDER && s->order_key[at] == k->u.s) {
            j = s->order_field[at];
        } else {
            for (j = 0; j < N_FIELDS && s->keys[j] != k->u.s; j++)
                ;
            if (j == N_FIELDS) j = -1;
            if (at < KEY_ORDER) s->order_key[at] = k->u.s, s->order_field[at] = (int8_t)j;
        }
        if (j >= 0) f[j] = &items[i + 1];
    }
    for (int j = 0; j < N_REQUIRED; j++)
        if (!f[j]) return -1;
    /* the exact types fast_trace._rows accepts */
    if (f[F_RECORD_ID]->t != T_INT || f[F_PG_ID]->t != T_INT || f[F_SEQ]->t != T_INT || f[F_P2P_SEQ]->t != T_INT
        || f[F_OP_ID]->t != T_INT || f[F_CREATED]->t != T_INT || f[F_PNAME]->t != T_STR || f[F_STATE]->t != T_STR
        || f[F_IS_P2P]->t != T_BOOL || f[F_RETIRED]->t != T_BOOL || f[F_THREAD_NAME]->t != T_STR
        || f[F_THREAD_ID]->t != T_STR || (f[F_TIMEOUT]->t != T_NONE && f[F_TIMEOUT]->t != T_INT))
        return -1;
    /* process_group as fields.process_group reads it; anything rarer is left to that rule */
    PyObject *pg_name, *pg_desc;
    Val *pg = f[F_PROCESS_GROUP];
    if (pg->t == T_STR) { pg_name = pg->u.s; pg_desc = s->empty; }
    else if (pg->t == T_NONE) { pg_name = pg_desc = s->empty; }
    else if (pg->t == T_TUPLE || pg->t == T_LIST) {
        Node *pn = &nodes[pg->u.node];
        Val *pi = ITEMS(pn);
        if (pn->len < 1 || pn->len > 2 || pi[0].t != T_STR || (pn->len == 2 && pi[1].t != T_STR))
            return -1;
        pg_name = pi[0].u.s;
        pg_desc = pn->len == 2 ? pi[1].u.s : s->empty;
    } else return -1;
    /* duration_ms: fields.duration_ms */
    double nan = NAN, d = nan;
    Val *dv = f[F_DURATION];
    if (dv && dv->t == T_FLOAT) d = dv->u.f >= 0 && dv->u.f < MAX_DURATION_MS ? dv->u.f : nan;
    else if (dv && dv->t == T_INT) d = dv->u.i >= 0 && (double)dv->u.i < MAX_DURATION_MS ? (double)dv->u.i : nan;
    *duration = d;
    Py_ssize_t stack = stack_index(s, f[F_FRAMES]);
    if (stack == -2) return -1;
    if (stack == -3) return -3;
    /* the kind's key: every categorical part, strings by their canonical address */
    if (key_room(s, 9)) return -3;
    int64_t *kb = keybuf;
    kb[0] = (int64_t)(uintptr_t)pg_name;
    kb[1] = (int64_t)(uintptr_t)pg_desc;
    kb[2] = f[F_PG_ID]->u.i;
    kb[3] = f[F_IS_P2P]->u.i | (f[F_RETIRED]->u.i << 1);
    kb[4] = (int64_t)(uintptr_t)f[F_PNAME]->u.s;
    kb[5] = (int64_t)(uintptr_t)f[F_STATE]->u.s;
    kb[6] = stack;
    kb[7] = f[F_TIMEOUT]->t == T_INT;
    kb[8] = f[F_TIMEOUT]->t == T_INT ? f[F_TIMEOUT]->u.i : 0;
    Py_ssize_t pos = 9;
    if ((pos = put_sizes(s, pos, f[F_IN_SIZES])) < 0 || (pos = put_sizes(s, pos, f[F_OUT_SIZES])) < 0
        || (pos = put_dtypes(s, pos, f[F_IN_DTYPES])) < 0 || (pos = put_dtypes(s, pos, f[F_OUT_DTYPES])) < 0)
        return PyErr_Occurred() ? -3 : -1;
    Py_ssize_t kind = s->last_kind;
    if (kind < 0 || pos != s->last_key_len || memcmp(keybuf, last_key, (size_t)pos * sizeof(int64_t))) {
        KindArg a = {f, pg_name, pg_desc, stack};
        kind = intern_key(s->kind_ids, s->kinds,
                          PyBytes_FromStringAndSize((const char *)keybuf, pos * (Py_ssize_t)sizeof(int64_t)),
                          make_kind, s, &a);
        if (kind < 0 || grow((void **)&last_key, &last_key_cap, (size_t)pos, sizeof(int64_t))) return -3;
        memcpy(last_key, keybuf, (size_t)pos * sizeof(int64_t));
        s->last_kind = kind, s->last_key_len = pos;
    }
    ints[0] = f[F_SEQ]->u.i;
    ints[1] = f[F_P2P_SEQ]->u.i;
    ints[2] = f[F_CREATED]->u.i;
    ints[3] = f[F_STARTED]->t == T_INT && f[F_STARTED]->u.i > 0 ? f[F_STARTED]->u.i : 0;
    ints[4] = f[F_COMPLETED]->t == T_INT && f[F_COMPLETED]->u.i > 0 ? f[F_COMPLETED]->u.i : 0;
    ints[5] = f[F_RECORD_ID]->u.i;
    ints[6] = f[F_OP_ID]->u.i;
    Py_ssize_t thread = thread_index(s, f[F_THREAD_ID]->u.s, f[F_THREAD_NAME]->u.s);
    if (thread < 0) return -3;
    ints[7] = thread;
    return kind;
}

static PyObject *columns(Scan *s, Val root) {
    if (root.t != T_DICT) return NULL;
    Node *top = &nodes[root.u.node];
    Val *ev = dict_get(s, top, s->k_entries);
    Node *en = NULL;
    if (ev && ev->t != T_NONE) {
        if (ev->t != T_LIST) return NULL;
        en = &nodes[ev->u.node];
        if (en->len > MAX_ENTRIES) return NULL;
    }
    uint32_t count = en ? en->len : 0;
    size_t nn = (size_t)s->n_nodes + 1;
    if (grow((void **)&materialized, &cap_materialized, nn, sizeof(PyObject *))
        || grow((void **)&node_frame, &cap_node_frame, nn, sizeof(int32_t))
        || grow((void **)&node_stack, &cap_node_stack, nn, sizeof(int32_t)))
        return NULL;
    memset(materialized, 0, nn * sizeof(PyObject *));
    memset(node_frame, 0xff, nn * sizeof(int32_t));
    memset(node_stack, 0xff, nn * sizeof(int32_t));
    s->phase2 = 1;
    PyObject *head = materialize(s, root, 0);
    PyObject *kind_of = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 4);
    PyObject *ints = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * N_INTS * 8);
    PyObject *durs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    PyObject *out = NULL;
    if (!head || !kind_of || !ints || !durs) goto done;
    int32_t *ko = (int32_t *)PyBytes_AS_STRING(kind_of);
    int64_t *iv = (int64_t *)PyBytes_AS_STRING(ints);
    double *dv = (double *)PyBytes_AS_STRING(durs);
    for (uint32_t i = 0; i < count; i++) {
        Py_ssize_t k = read_entry(s, ITEMS(en)[i], iv + N_INTS * (size_t)i, dv + i);
        if (k < 0) goto done;
        ko[i] = (int32_t)k;
    }
    out = PyTuple_Pack(8, head, s->kinds, kind_of, ints, durs, s->stacks, s->frames, s->threads);
done:
    Py_XDECREF(head);
    Py_XDECREF(kind_of);
    Py_XDECREF(ints);
    Py_XDECREF(durs);
    return out;
}

static void scan_free(Scan *s) {
    if (s->phase2)
        for (uint32_t i = 0; i < s->n_nodes; i++)
            if (materialized[i] != Py_None) Py_XDECREF(materialized[i]);
    PyMem_Free(s->fslots);
    size_t held = cap_nodes * sizeof(Node) + (cap_pool + cap_stack + cap_memo) * sizeof(Val)
                  + cap_marks * sizeof(size_t) + cap_materialized * sizeof(PyObject *)
                  + (cap_node_frame + cap_node_stack) * sizeof(int32_t) + (keycap + last_key_cap) * sizeof(int64_t);
    if (held > SCRATCH_KEEP) { /* a huge dump: do not keep its scratch for the next, small one */
        PyMem_Free(nodes); nodes = NULL; cap_nodes = 0;
        PyMem_Free(pool); pool = NULL; cap_pool = 0;
        PyMem_Free(stack); stack = NULL; cap_stack = 0;
        PyMem_Free(memo); memo = NULL; cap_memo = 0;
        PyMem_Free(marks); marks = NULL; cap_marks = 0;
        PyMem_Free(materialized); materialized = NULL; cap_materialized = 0;
        PyMem_Free(node_frame); node_frame = NULL; cap_node_frame = 0;
        PyMem_Free(node_stack); node_stack = NULL; cap_node_stack = 0;
        PyMem_Free(keybuf); keybuf = NULL; keycap = 0;
        PyMem_Free(last_key); last_key = NULL; last_key_cap = 0;
    }
    memo_used = 0;
    Py_XDECREF(s->frames);
    Py_XDECREF(s->stacks);
    Py_XDECREF(s->stack_ids);
    Py_XDECREF(s->kinds);
    Py_XDECREF(s->kind_ids);
    Py_XDECREF(s->threads);
    Py_XDECREF(s->thread_ids);
    Py_XDECREF(s->canon); /* last: it owns every string the above borrow */
}

static PyObject *canon_str(Scan *s, const char *text) {
    return canonical(s, PyUnicode_FromString(text));
}

/* Set while a scan uses the scratch arrays. Building Python objects can run a garbage collection,
 * whose finalizers may run Python code and let another thread in: a scan started then declines. */
static int busy;

static PyObject *scan(PyObject *self, PyObject *arg) {
    if (busy) Py_RETURN_NONE;
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE)) return NULL;
    busy = 1;
    Scan s;
    memset(&s, 0, sizeof s);
    s.data = buf.buf;
    s.size = buf.len;
    s.invalid_frame = -1;
    s.last_kind = -1;
    PyObject *out = NULL;
    Val root;
    s.canon = PyDict_New();
    s.frames = PyList_New(0);
    s.stacks = PyList_New(0);
    s.kinds = PyList_New(0);
    s.stack_ids = PyDict_New();
    s.kind_ids = PyDict_New();
    s.threads = PyList_New(0);
    s.thread_ids = PyDict_New();
    if (!s.canon || !s.frames || !s.stacks || !s.kinds || !s.stack_ids || !s.kind_ids || !s.threads
        || !s.thread_ids)
        goto done;
    for (int j = 0; j < N_FIELDS; j++)
        if (!(s.keys[j] = canon_str(&s, FIELD_NAMES[j]))) goto done;
    if (!(s.k_name = canon_str(&s, FRAME_KEY_NAME)) || !(s.k_filename = canon_str(&s, FRAME_KEY_FILENAME))
        || !(s.k_line = canon_str(&s, FRAME_KEY_LINE)) || !(s.k_entries = canon_str(&s, ENTRIES_KEY))
        || !(s.empty = canon_str(&s, "")))
        goto done;
    if (parse(&s, &root) == 0) out = columns(&s, root);
done:
    scan_free(&s);
    busy = 0;
    PyBuffer_Release(&buf);
    if (!out) {
        /* not for us, whatever the reason (a MemoryError included): the pure path decides */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return out;
}

/* Untracks a tuple the collector could never find in a cycle (no item it tracks), as CPython's own
 * collector does to every such tuple it walks, only sooner: an entry's sizes are tuples of ints, and
 * with them untracked so are the entries made from its template (entries_of), which the sidecar's
 * young collection then does not walk (~1000 new entries a busy rank's read, each walked once). */
static inline int tracked(PyObject *o) {
    return PyObject_IS_GC(o) && PyObject_GC_IsTracked(o);
}

static void untrack(PyObject *t) {
    if (!tracked(t)) return;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
        if (tracked(PyTuple_GET_ITEM(t, i))) return;
    PyObject_GC_UnTrack(t);
}

/* `untrack` on a template's plain tuples (its sizes, as the field rules made them: shapes first) */
static void untrack_sizes(PyObject *t) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *item = PyTuple_GET_ITEM(t, i);
        if (!PyTuple_CheckExact(item) || !tracked(item)) continue;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(item); k++)
            if (PyTuple_CheckExact(PyTuple_GET_ITEM(item, k))) untrack(PyTuple_GET_ITEM(item, k));
        untrack(item);
    }
}

/* entries_of(template_of, kind_of, ints, durations, start, stop, slots) -> (list, skipped)
 *
 * The entries [start, stop) as the trace's Entry tuples, from scan's columns (kind_of, ints and
 * durations as scan returns them, or arrays of the same bytes). Everything of an entry but its numbers
 * is its kind's and its thread's: template_of(kind, thread) gives it once per pair, as an Entry whose
 * number fields are placeholders (the field rules run on it in Python, decode/pickle_tail.py), or None
 * where the rules refuse the kind (its entries are skipped, and counted). Each entry is then that
 * template with its own numbers written into the positions `slots` names: record_id, collective_seq_id,
 * p2p_seq_id, op_id, time_created_ns, time_discovered_started_ns, time_discovered_completed_ns,
 * duration_ms. A time of 0 (PyTorch's None) and a NaN duration are None, as fields.discovered_ns and
 * fields.duration_ms read them. Nothing here reads the pickle: only columns scan has already checked. */
static PyObject *entries_of(PyObject *self, PyObject *args) {
    PyObject *template_of, *slots, *out = NULL, *cache = NULL;
    Py_buffer kb = {0}, ib = {0}, db = {0};
    Py_ssize_t start, stop, skipped = 0;
    if (!PyArg_ParseTuple(args, "Oy*y*y*nnO!", &template_of, &kb, &ib, &db, &start, &stop, &PyTuple_Type,
                          &slots))
        return NULL;
    Py_ssize_t n = kb.len / 4, pos[8];
    if (kb.len % 4 || ib.len != n * N_INTS * 8 || db.len != n * 8 || start < 0 || start > stop || stop > n
        || PyTuple_GET_SIZE(slots) != 8) {
        PyErr_SetString(PyExc_ValueError, "entries_of: columns of different lengths, or a bad start or slots");
        goto done;
    }
    for (int j = 0; j < 8; j++)
        if ((pos[j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(slots, j))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "entries_of: a negative slot");
            goto done;
        }
    const int32_t *kinds = kb.buf;
    const int64_t *ints = ib.buf;
    const double *durs = db.buf;
    if (!(out = PyList_New(0)) || !(cache = PyDict_New())) goto done;
    PyObject *tmpl = NULL; /* borrowed from cache: the template of the run of entries going on */
    int64_t run = -1;
    int untrack = 0; /* the template holds nothing the collector tracks, but for the numbers' slots */
    for (Py_ssize_t i = start; i < stop; i++) {
        const int64_t *v = ints + N_INTS * i;
        int64_t key = ((int64_t)kinds[i] << 32) | (uint32_t)v[7];
        if (key != run || !tmpl) { /* (entries come in runs of one kind: a lookup per run, not per entry) */
            PyObject *k = PyLong_FromLongLong(key);
            if (!k) goto fail;
            tmpl = PyDict_GetItemWithError(cache, k);
            if (!tmpl && !PyErr_Occurred()) {
                PyObject *t = PyObject_CallFunction(template_of, "iL", kinds[i], (long long)v[7]);
                if (t && t != Py_None && !(PyTuple_Check(t) && PyTuple_GET_SIZE(t) > 0)) {
                    PyErr_SetString(PyExc_TypeError, "entries_of: a template is a tuple or None");
                    Py_CLEAR(t);
                }
                if (t) {
                    for (int j = 0; j < 8; j++)
                        if (t != Py_None && pos[j] >= PyTuple_GET_SIZE(t)) {
                            PyErr_SetString(PyExc_ValueError, "entries_of: a slot past the template's end");
                            Py_CLEAR(t);
                            break;
                        }
                }
                if (t && PyDict_SetItem(cache, k, t) == 0) tmpl = t; /* the cache holds it */
                Py_XDECREF(t);
            }
            Py_DECREF(k);
            if (!tmpl) goto fail;
            run = key;
            untrack = 1;
            if (tmpl != Py_None) untrack_sizes(tmpl);
            for (Py_ssize_t f = 0; tmpl != Py_None && f < PyTuple_GET_SIZE(tmpl) && untrack; f++) {
                int slot = 0;
                for (int j = 0; j < 8; j++) slot |= pos[j] == f;
                untrack = slot || !tracked(PyTuple_GET_ITEM(tmpl, f));
            }
        }
        if (tmpl == Py_None) {
            skipped++;
            continue;
        }
        PyTypeObject *type = Py_TYPE(tmpl);
        Py_ssize_t size = PyTuple_GET_SIZE(tmpl);
        PyObject *e = type->tp_alloc(type, size); /* as tuple.__new__(Entry, ...) makes one */
        if (!e) goto fail;
        PyObject *nums[8] = {
            PyLong_FromLongLong(v[5]), PyLong_FromLongLong(v[0]), PyLong_FromLongLong(v[1]),
            PyLong_FromLongLong(v[6]), PyLong_FromLongLong(v[2]),
            v[3] > 0 ? PyLong_FromLongLong(v[3]) : Py_NewRef(Py_None),
            v[4] > 0 ? PyLong_FromLongLong(v[4]) : Py_NewRef(Py_None),
            durs[i] == durs[i] && durs[i] >= 0 && durs[i] < MAX_DURATION_MS ? PyFloat_FromDouble(durs[i])
                                                                          : Py_NewRef(Py_None)};
        int bad = 0;
        for (int j = 0; j < 8; j++) bad |= nums[j] == NULL;
        for (Py_ssize_t f = 0; f < size; f++) PyTuple_SET_ITEM(e, f, Py_NewRef(PyTuple_GET_ITEM(tmpl, f)));
        for (int j = 0; j < 8; j++) {
            Py_DECREF(PyTuple_GET_ITEM(e, pos[j]));
            PyTuple_SET_ITEM(e, pos[j], nums[j] ? nums[j] : Py_NewRef(Py_None));
        }
        if (untrack) PyObject_GC_UnTrack(e); /* its numbers are ints, floats or None */
        if (bad || PyList_Append(out, e)) {
            Py_DECREF(e);
            goto fail;
        }
        Py_DECREF(e);
    }
    Py_SETREF(out, Py_BuildValue("(On)", out, skipped));
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(cache);
    if (kb.obj) PyBuffer_Release(&kb);
    if (ib.obj) PyBuffer_Release(&ib);
    if (db.obj) PyBuffer_Release(&db);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, "scan(data) -> columns of a Flight Recorder pickle, or None (use the pure path)"},
    {"entries_of", entries_of, METH_VARARGS,
     "entries_of(template_of, kind_of, ints, durations, start, stop, slots) -> (list of Entry, skipped)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

/* The constants this build was compiled with (scanned.py checks them against fields.py at import:
 * an extension built from another version's rules is not used) */
static int add_constants(PyObject *m) {
    PyObject *names = PyTuple_New(N_FIELDS);
    if (!names) return -1;
    for (int j = 0; j < N_FIELDS; j++) {
        PyObject *k = PyUnicode_FromString(FIELD_NAMES[j]);
        if (!k) { Py_DECREF(names); return -1; }
        PyTuple_SET_ITEM(names, j, k);
    }
    PyObject *frame_keys = Py_BuildValue("(sss)", FRAME_KEY_NAME, FRAME_KEY_FILENAME, FRAME_KEY_LINE);
    PyObject *fields = frame_keys ? Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:d,s:N,s:i,s:N,s:s}", "MAX_ENTRIES", MAX_ENTRIES, "MAX_FRAMES", MAX_FRAMES,
        "MAX_SIZE_ELEMENTS", MAX_SIZE_ELEMENTS, "MAX_DTYPES", MAX_DTYPES, "MAX_DTYPE_LEN", MAX_DTYPE_LEN,
        "MAX_DURATION_MS", MAX_DURATION_MS, "FIELD_NAMES", names, "N_REQUIRED", N_REQUIRED,
        "FRAME_KEYS", frame_keys, "ENTRIES_KEY", ENTRIES_KEY) : NULL;
    if (!frame_keys) Py_DECREF(names);
    if (!fields) return -1;
    if (PyModule_AddObject(m, "FIELDS", fields)) { Py_DECREF(fields); return -1; }
    return 0;
}

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && add_constants(m)) Py_CLEAR(m);
    return m;
}
