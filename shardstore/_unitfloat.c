/* Optional compiled cast of decoded frames to float32 in [0, 1], for shardstore.torch.chw_float.
 *
 * Why: a LeRobot item's frames are float32 CHW in [0, 1], the uint8 value divided by 255; a
 * 16-frame history window of two 224x224 cameras is 19 MB of floats. numpy does it in two passes
 * (cast into the output, then divide it in place), and each store first reads its cache line
 * from memory, as the output is far larger than the cache. This module does it in one pass with
 * stores that bypass the cache (SSE2 streaming stores). tools/bench/unit_float.py measures both.
 *
 * unit_float(src, dst)
 *   src: a 2-D uint8 buffer (one colour plane; rows may be padded, columns contiguous);
 *   dst: a C-contiguous 2-D float32 buffer of the same shape. Writes dst = src / 255.0f, with the
 *   GIL released. The division is IEEE single precision in both the vector and the scalar path,
 *   so every value equals numpy's (and torch's) float32 x / 255.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static void one_row(const uint8_t *s, float *d, Py_ssize_t n) {
    Py_ssize_t c = 0;
#if defined(__SSE2__)
    const __m128 k = _mm_set1_ps(255.0f);
    const __m128i z = _mm_setzero_si128();
    for (; c < n && ((uintptr_t)(d + c) & 15) != 0; c++)
        d[c] = (float)s[c] / 255.0f;
    for (; c + 16 <= n; c += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + c));
        __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
        _mm_stream_ps(d + c, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), k));
        _mm_stream_ps(d + c + 4, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), k));
        _mm_stream_ps(d + c + 8, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), k));
        _mm_stream_ps(d + c + 12, _mm_div_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), k));
    }
#endif
    for (; c < n; c++)
        d[c] = (float)s[c] / 255.0f;
}

static PyObject *unit_float(PyObject *self, PyObject *args) {
    PyObject *src_obj, *dst_obj;
    if (!PyArg_ParseTuple(args, "OO", &src_obj, &dst_obj))
        return NULL;
    Py_buffer src, dst;
    if (PyObject_GetBuffer(src_obj, &src, PyBUF_STRIDES | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const char *why = NULL;
    if (src.ndim != 2 || dst.ndim != 2)
        why = "two 2-D buffers";
    else if (src.itemsize != 1 || (src.format && strcmp(src.format, "B") != 0))
        why = "a uint8 source";
    else if (dst.itemsize != 4 || (dst.format && strcmp(dst.format, "f") != 0))
        why = "a float32 destination";
    else if (src.shape[0] != dst.shape[0] || src.shape[1] != dst.shape[1])
        why = "the same shape";
    else if (src.strides[1] != 1)
        why = "contiguous source columns";
    if (why != NULL) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_Format(PyExc_ValueError, "unit_float needs %s", why);
        return NULL;
    }
    Py_ssize_t rows = src.shape[0], cols = src.shape[1], stride = src.strides[0];
    const uint8_t *s = (const uint8_t *)src.buf;
    float *d = (float *)dst.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < rows; r++)
        one_row(s + r * stride, d + r * cols, cols);
#if defined(__SSE2__)
    _mm_sfence(); /* the streaming stores are seen by whoever reads dst next */
#endif
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"unit_float", unit_float, METH_VARARGS, "dst = src / 255 as float32, one pass, GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_unitfloat", NULL, -1, methods};

PyMODINIT_FUNC PyInit__unitfloat(void) { return PyModule_Create(&module); }
