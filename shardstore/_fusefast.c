/* Optional compiled hot paths of a local shardstore mount (shardstore.mount_fs).
 *
 * Why: through mfusepy every libfuse callback is a ctypes call into Python (several us), and
 * the two busiest paths make many: a folder listing calls libfuse's `filler` once per entry
 * (768,000 calls for the flat root of the benchmark dataset), and reading a file costs an OPEN,
 * a READ and a RELEASE callback. This module lets them run without Python:
 *
 * fill(filler, buf, names, dirs, first_offset, file_stat, dir_stat) -> accepted
 *   Calls libfuse's readdir filler (address `filler`, on buffer `buf`) for each name of the
 *   list `names` (bytes), entry i at offset first_offset + i, with the stat at `dir_stat` when
 *   dirs[i] is nonzero, else `file_stat`. Stops when the filler says its buffer is full and
 *   returns how many entries it took.
 *
 * configure(fh_offset, flags_word_offset, direct_mask, keep_mask, open, read_buf, release)
 *   The layout of this libfuse's `struct fuse_file_info` (taken from mfusepy's ctypes struct by
 *   the caller) and the Python callbacks (addresses; 0 for none) to fall back to.
 * register(path, fd, offset, size, direct)
 *   Remembers that `path` is `size` bytes at `offset` of descriptor `fd` (a checked shard),
 *   opened direct_io if `direct`. A fixed table of SLOTS paths, a newer entry replacing an
 *   older one in its slot: memory stays bounded whatever the dataset's size.
 * addresses() -> (open, read_buf, release)
 *   C functions with libfuse 3's signatures for these operations. open answers from the table
 *   (a handle owning a copy of the entry, and the open flags); read_buf hands libfuse the
 *   descriptor and position, so libfuse splices the range; release frees the handle. A path
 *   not in the table, or a handle 0, goes to the Python callback given to configure.
 *
 * names_open(uri) -> capsule
 *   A read-only connection to an index.sqlite (a SQLite URI) for names_page, through the SQLite
 *   library the process already has (libsqlite3.so.0, found at run time: no build-time
 *   dependency). Raises ImportError without one. One connection per thread (no SQLite mutex).
 * names_page(capsule, lo, after, hi, prefix_len, limit) -> (blob, count, last_key, state)
 *   The flat-layout file names "<key[prefix_len:]>.<part>" of up to `limit` samples in key order
 *   from key `lo` (bytes; past it if `after`) below `hi` (bytes or None), as one bytes object:
 *   `count` UTF-8 names, each ended by a NUL. Why: through Python's sqlite3 module each row is
 *   a tuple and strings (768,000 names of the benchmark's flat root cost 0.5 s that way), and
 *   building the names in SQL is slower still; here the keys (key index) and the part names
 *   (covering index, in (tar_file_id, sample_index) order) are read by two statements merged
 *   in step, a seek only where key order leaves tar order. A sample's repeated part names count
 *   once. `last_key`: the last sample consumed (None if none). `state`: 0 the range ended,
 *   1 more may follow (limit reached), 2 stopped before a key that is not a plain file name
 *   here (empty after the prefix, or holding a '/': a subfolder), which the caller lists.
 * fill_blob(filler, buf, blob, start, count, first_offset, file_stat) -> accepted
 *   fill for a names_page blob: entries start..count-1 (all files), entry start at first_offset.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define SLOTS 16384

typedef int (*filler_t)(void *buf, const char *name, const void *stat, off_t off, int flags);
typedef int (*open_t)(const char *path, void *fi);
typedef int (*read_buf_t)(const char *path, void **bufp, size_t size, off_t off, void *fi);
typedef int (*release_t)(const char *path, void *fi);

/* libfuse's struct fuse_buf and fuse_bufvec with one buffer (stable across libfuse 3). */
struct buf {
    size_t size;
    int flags;
    void *mem;
    int fd;
    off_t pos;
};
struct bufvec {
    size_t count, idx, off;
    struct buf buf[1];
};
#define BUF_IS_FD (1 << 1)
#define BUF_FD_SEEK (1 << 2)
#define BUF_FD_RETRY (1 << 3)

struct member {
    int fd;
    int direct;
    int64_t offset, size;
};
struct slot {
    char *path;
    struct member m;
};

static struct slot table[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Py_ssize_t fh_offset = -1, word_offset;
static uint32_t direct_mask, keep_mask;
static open_t py_open;
static read_buf_t py_read_buf;
static release_t py_release;

static size_t slot_of(const char *path) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)path; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (size_t)(h % SLOTS);
}

static uint64_t *fh_of(void *fi) { return (uint64_t *)((char *)fi + fh_offset); }

static int c_open(const char *path, void *fi) {
    struct member *m = NULL;
    if (fh_offset >= 0) {
        struct slot *s = &table[slot_of(path)];
        pthread_mutex_lock(&lock);
        if (s->path != NULL && strcmp(s->path, path) == 0 && (m = malloc(sizeof *m)) != NULL)
            *m = s->m;
        pthread_mutex_unlock(&lock);
    }
    if (m == NULL)
        return py_open != NULL ? py_open(path, fi) : -38; /* ENOSYS */
    *fh_of(fi) = (uint64_t)(uintptr_t)m;
    *(uint32_t *)((char *)fi + word_offset) |= m->direct ? direct_mask : keep_mask;
    return 0;
}

static int c_read_buf(const char *path, void **bufp, size_t size, off_t off, void *fi) {
    struct member *m = fi != NULL ? (struct member *)(uintptr_t)*fh_of(fi) : NULL;
    if (m == NULL)
        return py_read_buf != NULL ? py_read_buf(path, bufp, size, off, fi) : -5; /* EIO */
    struct bufvec *v = calloc(1, sizeof *v + 64); /* libfuse frees it; room for newer fields */
    if (v == NULL)
        return -12; /* ENOMEM */
    int64_t left = off < m->size ? m->size - off : 0;
    v->count = 1;
    v->buf[0].size = (int64_t)size < left ? size : (size_t)left;
    v->buf[0].flags = BUF_IS_FD | BUF_FD_SEEK | BUF_FD_RETRY;
    v->buf[0].fd = m->fd;
    v->buf[0].pos = m->offset + off;
    *bufp = v;
    return 0;
}

static int c_release(const char *path, void *fi) {
    struct member *m = (struct member *)(uintptr_t)*fh_of(fi);
    if (m == NULL)
        return py_release != NULL ? py_release(path, fi) : 0;
    free(m);
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    Py_ssize_t fh_off, word_off;
    unsigned long dmask, kmask;
    unsigned long long o, r, rel;
    if (!PyArg_ParseTuple(args, "nnkkKKK", &fh_off, &word_off, &dmask, &kmask, &o, &r, &rel))
        return NULL;
    fh_offset = fh_off;
    word_offset = word_off;
    direct_mask = (uint32_t)dmask;
    keep_mask = (uint32_t)kmask;
    py_open = (open_t)(uintptr_t)o;
    py_read_buf = (read_buf_t)(uintptr_t)r;
    py_release = (release_t)(uintptr_t)rel;
    Py_RETURN_NONE;
}

static PyObject *register_member(PyObject *self, PyObject *args) {
    const char *path;
    int fd, direct;
    long long offset, size;
    if (!PyArg_ParseTuple(args, "yiLLp", &path, &fd, &offset, &size, &direct))
        return NULL;
    struct slot *s = &table[slot_of(path)];
    char *copy = NULL;
    pthread_mutex_lock(&lock);
    if (s->path == NULL || strcmp(s->path, path) != 0) {
        copy = strdup(path);
        if (copy == NULL) {
            pthread_mutex_unlock(&lock);
            return PyErr_NoMemory();
        }
        free(s->path);
        s->path = copy;
    }
    s->m.fd = fd;
    s->m.direct = direct;
    s->m.offset = offset;
    s->m.size = size;
    pthread_mutex_unlock(&lock);
    Py_RETURN_NONE;
}

static PyObject *addresses(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("(KKK)", (unsigned long long)(uintptr_t)c_open, (unsigned long long)(uintptr_t)c_read_buf,
                         (unsigned long long)(uintptr_t)c_release);
}

static PyObject *fill(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "fill takes 7 arguments");
        return NULL;
    }
    filler_t filler = (filler_t)PyLong_AsVoidPtr(args[0]);
    void *buf = PyLong_AsVoidPtr(args[1]);
    PyObject *names = args[2];
    long long first = PyLong_AsLongLong(args[4]);
    void *file_st = PyLong_AsVoidPtr(args[5]);
    void *dir_st = PyLong_AsVoidPtr(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_Check(names) || !PyBytes_Check(args[3]) || PyBytes_GET_SIZE(args[3]) < PyList_GET_SIZE(names)) {
        PyErr_SetString(PyExc_TypeError, "fill: names must be a list, dirs bytes at least as long");
        return NULL;
    }
    const char *dirs = PyBytes_AS_STRING(args[3]);
    Py_ssize_t n = PyList_GET_SIZE(names), i;
    for (i = 0; i < n; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "fill: names must be bytes");
            return NULL;
        }
        if (filler(buf, PyBytes_AS_STRING(name), dirs[i] ? dir_st : file_st, (off_t)(first + i), 0))
            break;
    }
    return PyLong_FromSsize_t(i);
}

/* ----- flat listings straight from index.sqlite -------------------------------------------------- */

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;
#define SQ_OK 0
#define SQ_ROW 100
#define SQ_DONE 101
#define SQ_OPEN_READONLY 0x00000001
#define SQ_OPEN_URI 0x00000040
#define SQ_OPEN_NOMUTEX 0x00008000

static struct {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close_v2)(sqlite3 *);
    int (*exec)(sqlite3 *, const char *, void *, void *, char **);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, void (*)(void *));
    int (*bind_int64)(sqlite3_stmt *, int, long long);
    int (*bind_null)(sqlite3_stmt *, int);
    int (*step)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    long long (*column_int64)(sqlite3_stmt *, int);
    const char *(*errmsg)(sqlite3 *);
    int loaded;
} sq;

#define SQ_TRANSIENT ((void (*)(void *))-1)

/* The SQLite library Python's sqlite3 module loaded, else the system's; -1 if there is none. */
static int sq_load(void) {
    if (sq.loaded)
        return sq.loaded;
    void *lib = dlopen("libsqlite3.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        lib = dlopen("libsqlite3.so.0", RTLD_NOW);
    sq.loaded = -1;
    if (lib == NULL)
        return -1;
#define SQ_SYM(field, name)                                 \
    if ((*(void **)&sq.field = dlsym(lib, name)) == NULL) \
        return -1;
    SQ_SYM(open_v2, "sqlite3_open_v2")
    SQ_SYM(close_v2, "sqlite3_close_v2")
    SQ_SYM(exec, "sqlite3_exec")
    SQ_SYM(prepare_v2, "sqlite3_prepare_v2")
    SQ_SYM(bind_text, "sqlite3_bind_text")
    SQ_SYM(bind_int64, "sqlite3_bind_int64")
    SQ_SYM(bind_null, "sqlite3_bind_null")
    SQ_SYM(step, "sqlite3_step")
    SQ_SYM(reset, "sqlite3_reset")
    SQ_SYM(finalize, "sqlite3_finalize")
    SQ_SYM(column_text, "sqlite3_column_text")
    SQ_SYM(column_bytes, "sqlite3_column_bytes")
    SQ_SYM(column_int64, "sqlite3_column_int64")
    SQ_SYM(errmsg, "sqlite3_errmsg")
#undef SQ_SYM
    sq.loaded = 1;
    return 1;
}

/* Keys in key order (the UNIQUE index) with their sample; part names in index order, from a sample on. */
static const char KEYS_SQL[] = "SELECT sample_key, tar_file_id, sample_index FROM samples "
                               "WHERE sample_key >= ?1 AND (?2 IS NULL OR sample_key < ?2) ORDER BY sample_key LIMIT ?3";
static const char PARTS_SQL[] = "SELECT tar_file_id, sample_index, part_name FROM sample_parts INDEXED BY idx_sample_parts_full "
                                "WHERE (tar_file_id, sample_index) >= (?1, ?2) ORDER BY tar_file_id, sample_index, part_name";

struct names {
    sqlite3 *db;
    sqlite3_stmt *keys, *parts;
};

static void names_free(PyObject *capsule) {
    struct names *n = PyCapsule_GetPointer(capsule, "shardstore._fusefast.names");
    if (n == NULL)
        return;
    if (n->keys != NULL)
        sq.finalize(n->keys);
    if (n->parts != NULL)
        sq.finalize(n->parts);
    sq.close_v2(n->db);
    free(n);
}

static PyObject *names_open(PyObject *self, PyObject *args) {
    const char *uri;
    long long mmap_size;
    if (!PyArg_ParseTuple(args, "yL", &uri, &mmap_size))
        return NULL;
    if (sq_load() < 0) {
        PyErr_SetString(PyExc_ImportError, "no libsqlite3.so.0 in this process");
        return NULL;
    }
    struct names *n = calloc(1, sizeof *n);
    if (n == NULL)
        return PyErr_NoMemory();
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA mmap_size=%lld", mmap_size);
    int rc = sq.open_v2(uri, &n->db, SQ_OPEN_READONLY | SQ_OPEN_URI | SQ_OPEN_NOMUTEX, NULL);
    if (rc == SQ_OK)
        rc = sq.exec(n->db, pragma, NULL, NULL, NULL);
    if (rc == SQ_OK)
        rc = sq.prepare_v2(n->db, KEYS_SQL, -1, &n->keys, NULL);
    if (rc == SQ_OK)
        rc = sq.prepare_v2(n->db, PARTS_SQL, -1, &n->parts, NULL);
    if (rc != SQ_OK) {
        PyErr_Format(PyExc_OSError, "index %s: %s", uri, n->db != NULL ? sq.errmsg(n->db) : "out of memory");
        if (n->keys != NULL)
            sq.finalize(n->keys);
        sq.close_v2(n->db);
        free(n);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(n, "shardstore._fusefast.names", names_free);
    if (capsule == NULL) {
        sq.finalize(n->keys);
        sq.finalize(n->parts);
        sq.close_v2(n->db);
        free(n);
    }
    return capsule;
}

struct out {
    char *data;
    size_t len, cap;
    int failed;
};

static void out_put(struct out *o, const void *data, size_t len) {
    if (o->failed)
        return;
    if (o->len + len > o->cap) {
        size_t cap = o->cap ? o->cap : 1 << 16;
        while (cap < o->len + len)
            cap *= 2;
        char *grown = realloc(o->data, cap);
        if (grown == NULL) {
            o->failed = 1;
            return;
        }
        o->data = grown;
        o->cap = cap;
    }
    memcpy(o->data + o->len, data, len);
    o->len += len;
}

/* The parts statement's current row: rc (SQ_ROW when on a row) and its sample (t, i). */
struct cursor {
    sqlite3_stmt *stmt;
    int rc;
    long long t, i;
};

static void cur_step(struct cursor *c) {
    c->rc = sq.step(c->stmt);
    if (c->rc == SQ_ROW) {
        c->t = sq.column_int64(c->stmt, 0);
        c->i = sq.column_int64(c->stmt, 1);
    }
}

static void cur_seek(struct cursor *c, long long t, long long i) {
    sq.reset(c->stmt);
    sq.bind_int64(c->stmt, 1, t);
    sq.bind_int64(c->stmt, 2, i);
    cur_step(c);
}

static int cur_before(const struct cursor *c, long long t, long long i) {
    return c->t < t || (c->t == t && c->i < i);
}

static PyObject *names_page(PyObject *self, PyObject *args) {
    PyObject *capsule, *hi_obj;
    const char *lo;
    Py_ssize_t lo_len, prefix_len, limit;
    int after;
    if (!PyArg_ParseTuple(args, "Oy#pOnn", &capsule, &lo, &lo_len, &after, &hi_obj, &prefix_len, &limit))
        return NULL;
    struct names *n = PyCapsule_GetPointer(capsule, "shardstore._fusefast.names");
    if (n == NULL)
        return NULL;
    if (hi_obj != Py_None && !PyBytes_Check(hi_obj)) {
        PyErr_SetString(PyExc_TypeError, "names_page: hi must be bytes or None");
        return NULL;
    }
    struct out o = {0}, last = {0};
    Py_ssize_t count = 0, rows = 0;
    int state = 0, rc, first = 1, have_last = 0;
    sqlite3_stmt *k = n->keys;
    struct cursor c = {n->parts, SQ_DONE, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    sq.reset(k);
    sq.bind_text(k, 1, lo, (int)lo_len, SQ_TRANSIENT);
    if (hi_obj == Py_None)
        sq.bind_null(k, 2);
    else
        sq.bind_text(k, 2, PyBytes_AS_STRING(hi_obj), (int)PyBytes_GET_SIZE(hi_obj), SQ_TRANSIENT);
    sq.bind_int64(k, 3, (long long)limit + 1 + (after ? 1 : 0));
    while ((rc = sq.step(k)) == SQ_ROW) {
        const char *key = (const char *)sq.column_text(k, 0);
        int key_len = sq.column_bytes(k, 0);
        if (first && after && key_len == lo_len && memcmp(key, lo, lo_len) == 0) {
            first = 0;
            continue; /* "past lo" */
        }
        first = 0;
        if (rows >= limit) {
            state = 1;
            break;
        }
        const char *rest = key + prefix_len;
        int rest_len = key_len - (int)prefix_len;
        if (rest_len <= 0 || memchr(rest, '/', rest_len) != NULL) {
            state = 2;
            break;
        }
        long long t = sq.column_int64(k, 1), i = sq.column_int64(k, 2);
        /* the parts cursor to sample (t, i): a step or two when key order follows tar order, else a seek */
        if (c.rc == SQ_ROW && c.t == t && cur_before(&c, t, i) && i - c.i <= 2) {
            while (c.rc == SQ_ROW && cur_before(&c, t, i))
                cur_step(&c);
        } else if (c.rc != SQ_ROW || c.t != t || c.i != i) {
            cur_seek(&c, t, i);
        }
        size_t prev_off = 0;
        int prev_len = -1;
        while (c.rc == SQ_ROW && c.t == t && c.i == i) {
            const char *part = (const char *)sq.column_text(c.stmt, 2);
            int part_len = sq.column_bytes(c.stmt, 2);
            /* parts come sorted: a repeated name follows its first */
            if (part != NULL && !(prev_len == part_len && !o.failed && memcmp(o.data + prev_off, part, part_len) == 0)) {
                out_put(&o, rest, rest_len);
                out_put(&o, ".", 1);
                prev_off = o.len;
                prev_len = part_len;
                out_put(&o, part, part_len);
                out_put(&o, "", 1);
                count++;
            }
            cur_step(&c);
        }
        last.len = 0;
        out_put(&last, key, key_len);
        have_last = 1;
        rows++;
        if ((c.rc != SQ_ROW && c.rc != SQ_DONE) || o.failed || last.failed)
            break;
    }
    if ((rc != SQ_ROW && rc != SQ_DONE) || (c.rc != SQ_ROW && c.rc != SQ_DONE))
        state = -1;
    sq.reset(k);
    sq.reset(c.stmt);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (o.failed || last.failed)
        PyErr_NoMemory();
    else if (state < 0)
        PyErr_Format(PyExc_OSError, "reading names from the index: %s", sq.errmsg(n->db));
    else if (have_last)
        result = Py_BuildValue("(y#ny#i)", o.data != NULL ? o.data : "", (Py_ssize_t)o.len, count, last.data,
                               (Py_ssize_t)last.len, state);
    else
        result = Py_BuildValue("(y#nOi)", "", (Py_ssize_t)0, count, Py_None, state);
    free(o.data);
    free(last.data);
    return result;
}

static PyObject *fill_blob(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "fill_blob takes 7 arguments");
        return NULL;
    }
    filler_t filler = (filler_t)PyLong_AsVoidPtr(args[0]);
    void *buf = PyLong_AsVoidPtr(args[1]);
    Py_ssize_t start = PyLong_AsSsize_t(args[3]), count = PyLong_AsSsize_t(args[4]);
    long long first = PyLong_AsLongLong(args[5]);
    void *file_st = PyLong_AsVoidPtr(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "fill_blob: blob must be bytes");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(args[2]), *end = p + PyBytes_GET_SIZE(args[2]);
    Py_ssize_t i;
    for (i = 0; i < start && p < end; i++)
        p += strlen(p) + 1;
    Py_ssize_t taken = 0;
    for (; i < count && p < end; i++, taken++) {
        if (filler(buf, p, file_st, (off_t)(first + taken), 0))
            break;
        p += strlen(p) + 1;
    }
    return PyLong_FromSsize_t(taken);
}

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, "Feed a page of names to libfuse's filler."},
    {"configure", configure, METH_VARARGS, "fuse_file_info layout and Python fallbacks."},
    {"register", register_member, METH_VARARGS, "Remember a member's descriptor, offset and size."},
    {"addresses", addresses, METH_NOARGS, "Addresses of the C open, read_buf and release."},
    {"names_open", names_open, METH_VARARGS, "A connection to an index.sqlite for names_page."},
    {"names_page", names_page, METH_VARARGS, "A page of flat-layout file names, joined in C."},
    {"fill_blob", (PyCFunction)(void (*)(void))fill_blob, METH_FASTCALL, "fill for a names_page blob."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fusefast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fusefast(void) { return PyModule_Create(&module); }
