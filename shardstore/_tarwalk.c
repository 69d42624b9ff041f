/* Optional compiled header walk for shardstore.tarscan.
 *
 * Why: prepare walks ~770,000 tar headers of the default benchmark; in Python each costs about
 * 2 us (slice, octal parse, checksum by numpy, name decode), twice the bare header-walk floor.
 * This module does the same work for the one common case, plain ustar regular files, and
 * stops at the first header it is not sure about. The Python walker (the reference) then takes
 * over at exactly that offset, so every other format, and every error, goes through the same
 * Python code as without this module.
 *
 * walk(buffer, offset, file_size, max_count)
 *     -> (names, header_offsets, data_offsets, sizes, stop)
 *   Walks consecutive headers from `offset` while each one is a plain regular file that the
 *   Python fast path would accept without error: type '0', an 11-digit octal size field ended
 *   by NUL, no name prefix, data inside the file, and a checksum field spelled "%06o\0 " or
 *   "%07o\0" equal to the unsigned sum (what every current writer writes; any other checksum,
 *   signed sums included, is left to the Python walker's exact check). `stop` is the
 *   offset of the first header not taken (or the end). Names are decoded as tarfile does
 *   (UTF-8, surrogateescape, up to the first NUL).
 *
 * plain(data, lo, hi) -> list[(name, data_offset, size)] | None | NotImplemented
 *   tarscan.plain_members for data[lo:hi]: None where the Python version returns None for
 *   certain, NotImplemented where the size field is spelled in a way only Python's int()
 *   decides (the caller then runs the Python version).
 *
 * fill(sample, data, lo, hi) -> key | None
 *   The random-read hot path (Dataset._build): parses the plain ustar headers of one sample
 *   in data[lo:hi], splits each name at its first dot into key and part, and stores
 *   sample[part] = bytes of the member. Returns the key; None whenever anything is not the
 *   common case (a name with a folder or a leading "__", a name prefix, two keys, no member,
 *   any header plain() would not take): the caller then runs the Python path, which gives
 *   the same answer or raises its error. Entries stored before a None are the caller's to
 *   discard.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BLOCK 512

static int octal_digits(const unsigned char *p, Py_ssize_t n, long long *out) {
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '7')
            return 0;
        v = (v << 3) | (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* 1 if the header's checksum field is spelled the usual way and equals the unsigned sum. */
static int checksum_ok(const unsigned char *h) {
    long long stored;
    const unsigned char *f = h + 148;
    if (f[6] == 0 && f[7] == ' ') {
        if (!octal_digits(f, 6, &stored))
            return 0;
    } else if (f[7] == 0) {
        if (!octal_digits(f, 7, &stored))
            return 0;
    } else {
        return 0;
    }
    long long sum = 8 * ' ';
    for (int i = 0; i < 148; i++)
        sum += h[i];
    for (int i = 156; i < BLOCK; i++)
        sum += h[i];
    return stored == sum;
}

static PyObject *decode_name(const unsigned char *p, Py_ssize_t max) {
    const unsigned char *nul = memchr(p, 0, (size_t)max);
    Py_ssize_t len = nul ? (Py_ssize_t)(nul - p) : max;
    return PyUnicode_DecodeUTF8((const char *)p, len, "surrogateescape");
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *tarwalk_walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long offset, file_size;
    Py_ssize_t max_count;
    if (!PyArg_ParseTuple(args, "y*LLn", &view, &offset, &file_size, &max_count))
        return NULL;
    PyObject *names = PyList_New(0), *heads = PyList_New(0), *datas = PyList_New(0), *sizes = PyList_New(0);
    PyObject *result = NULL;
    if (!names || !heads || !datas || !sizes)
        goto done;
    const unsigned char *buf = view.buf;
    long long limit = file_size < (long long)view.len ? file_size : (long long)view.len;
    Py_ssize_t count = 0;
    while (count < max_count && offset >= 0 && offset + BLOCK <= limit) {
        const unsigned char *h = buf + offset;
        long long size;
        if (h[156] != '0' || h[135] != 0 || h[345] != 0 || !octal_digits(h + 124, 11, &size))
            break;
        long long next = offset + BLOCK + ((size + BLOCK - 1) & ~(long long)(BLOCK - 1));
        if (next > file_size || !checksum_ok(h))
            break;
        if (append_new(names, decode_name(h, 100)) < 0 || append_new(heads, PyLong_FromLongLong(offset)) < 0 ||
            append_new(datas, PyLong_FromLongLong(offset + BLOCK)) < 0 ||
            append_new(sizes, PyLong_FromLongLong(size)) < 0)
            goto done;
        offset = next;
        count++;
    }
    result = Py_BuildValue("(OOOOL)", names, heads, datas, sizes, offset);
done:
    Py_XDECREF(names);
    Py_XDECREF(heads);
    Py_XDECREF(datas);
    Py_XDECREF(sizes);
    PyBuffer_Release(&view);
    return result;
}

/* The size field as plain_members reads it: int(field.rstrip(b"\0 "), 8).
 * 1: value in *out; 0: Python raises ValueError (empty); -1: only Python's int() can tell. */
static int plain_size(const unsigned char *f, long long *out) {
    Py_ssize_t n = 12;
    while (n > 0 && (f[n - 1] == 0 || f[n - 1] == ' '))
        n--;
    if (n == 0)
        return 0;
    return octal_digits(f, n, out) ? 1 : -1;
}

static PyObject *tarwalk_plain(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &lo, &hi))
        return NULL;
    PyObject *out = PyList_New(0);
    PyObject *result = NULL;
    if (out == NULL)
        goto done;
    const unsigned char *buf = view.buf;
    Py_ssize_t pos = lo;
    if (lo < 0 || hi > view.len) { /* Python: negative offsets or a short buffer */
        result = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    while (pos < hi) {
        if (pos + BLOCK > hi) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        const unsigned char *h = buf + pos;
        if (h[156] != '0' || memcmp(h + 257, "ustar", 5) != 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        long long size;
        int s = plain_size(h + 124, &size);
        if (s <= 0) {
            result = Py_NewRef(s == 0 ? Py_None : Py_NotImplemented);
            goto done;
        }
        PyObject *name = decode_name(h, 100);
        if (name == NULL)
            goto done;
        if (h[345]) {
            PyObject *prefix = decode_name(h + 345, 155);
            PyObject *joined = prefix ? PyUnicode_FromFormat("%U/%U", prefix, name) : NULL;
            Py_XDECREF(prefix);
            Py_DECREF(name);
            if (joined == NULL)
                goto done;
            name = joined;
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        if (len > 0 && PyUnicode_READ_CHAR(name, len - 1) == '/') {
            Py_DECREF(name);
            result = Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t start = pos + BLOCK;
        pos = start + (Py_ssize_t)((size + BLOCK - 1) & ~(long long)(BLOCK - 1));
        if (append_new(out, Py_BuildValue("(NnL)", name, start, size)) < 0)
            goto done;
    }
    result = pos == hi ? Py_NewRef(out) : Py_NewRef(Py_None);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return result;
}

/* Stores one member's part in `sample` if its name is "key.part" with no folder and no leading
 * "__" (the rules of keys.split_name reduce to "cut at the first dot" there). 1: stored (or a
 * name without a part, skipped as split_name skips it); 0: not the common case; -1: error.
 * `key`/`key_len` hold the sample's key bytes once the first part has set them. */
static int fill_member(PyObject *sample, const unsigned char *name, Py_ssize_t len, const unsigned char *data,
                       long long size, const unsigned char **key, Py_ssize_t *key_len) {
    if (memchr(name, '/', (size_t)len) != NULL || (len >= 2 && name[0] == '_' && name[1] == '_'))
        return 0;
    const unsigned char *dot = memchr(name, '.', (size_t)len);
    if (dot == NULL || dot == name)
        return 1;
    Py_ssize_t klen = (Py_ssize_t)(dot - name);
    if (*key == NULL) {
        *key = name;
        *key_len = klen;
    } else if (klen != *key_len || memcmp(name, *key, (size_t)klen) != 0) {
        return 0;
    }
    PyObject *part = PyUnicode_DecodeUTF8((const char *)dot + 1, len - klen - 1, "surrogateescape");
    if (part == NULL)
        return -1;
    PyObject *value = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    int rc = value == NULL ? -1 : PyDict_SetItem(sample, part, value);
    Py_DECREF(part);
    Py_XDECREF(value);
    return rc < 0 ? -1 : 1;
}

static PyObject *tarwalk_fill(PyObject *self, PyObject *args) {
    PyObject *sample;
    Py_buffer view;
    Py_ssize_t lo, hi;
    if (!PyArg_ParseTuple(args, "O!y*nn", &PyDict_Type, &sample, &view, &lo, &hi))
        return NULL;
    PyObject *result = NULL;
    const unsigned char *buf = view.buf;
    const unsigned char *key = NULL;
    Py_ssize_t key_len = 0, pos = lo;
    if (lo < 0 || hi > view.len)
        goto fallback;
    while (pos < hi) {
        const unsigned char *h = buf + pos;
        long long size;
        if (pos + BLOCK > hi || h[156] != '0' || memcmp(h + 257, "ustar", 5) != 0 || h[345] != 0 ||
            plain_size(h + 124, &size) != 1)
            goto fallback;
        Py_ssize_t start = pos + BLOCK;
        if (size > hi - start)
            goto fallback;
        const unsigned char *nul = memchr(h, 0, 100);
        Py_ssize_t len = nul ? (Py_ssize_t)(nul - h) : 100;
        if (len == 0 || h[len - 1] == '/')
            goto fallback;
        int rc = fill_member(sample, h, len, buf + start, size, &key, &key_len);
        if (rc < 0)
            goto done;
        if (rc == 0)
            goto fallback;
        pos = start + (Py_ssize_t)((size + BLOCK - 1) & ~(long long)(BLOCK - 1));
    }
    if (pos != hi || key == NULL)
        goto fallback;
    result = PyUnicode_DecodeUTF8((const char *)key, key_len, "surrogateescape");
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", tarwalk_walk, METH_VARARGS, "Walk plain ustar regular-file headers from an offset."},
    {"plain", tarwalk_plain, METH_VARARGS, "tarscan.plain_members for data[lo:hi]."},
    {"fill", tarwalk_fill, METH_VARARGS, "Store one plain sample's parts in a dict; its key, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tarwalk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tarwalk(void) { return PyModule_Create(&module); }
