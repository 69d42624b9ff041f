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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
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

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, "Feed a page of names to libfuse's filler."},
    {"configure", configure, METH_VARARGS, "fuse_file_info layout and Python fallbacks."},
    {"register", register_member, METH_VARARGS, "Remember a member's descriptor, offset and size."},
    {"addresses", addresses, METH_NOARGS, "Addresses of the C open, read_buf and release."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fusefast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fusefast(void) { return PyModule_Create(&module); }
