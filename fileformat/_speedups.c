/* skiff.fileformat._speedups: the produce path's per-record walk, compiled.
 *
 * walk(data, pos, count, keys_required) -> (int, bool) | None
 *
 * The twin of skiff.fileformat.log_validator._walk (the reference: read it first). It walks
 * `count` Kafka v2 records from byte `pos` to the end of `data` (any buffer) and returns the
 * largest zigzag-encoded timestamp delta and whether any delta is negative (the produce path's
 * min timestamp: the batch's base timestamp unless a delta is negative) when every record is
 * well formed, in exactly the
 * cases where `_walk` returns, with the same value. In every other case (a bad length,
 * offset delta or field, a keyless record when `keys_required`, a varint too long, a record
 * running past the end, bytes left over, or a timestamp delta past 64 bits) it returns None
 * and raises nothing: the caller runs `_walk`, which names the fault with Kafka's message.
 * So only the accepting path lives here, and tests/unit/test_speedups.py checks both on the
 * same corpus (valid and malformed batches) for the same answer.
 *
 * Record layout (Kafka's DefaultRecord): length varint, attributes int8, timestampDelta
 * varlong, offsetDelta varint, key length varint (-1 = null) and bytes, value length varint
 * (-1 = null) and bytes, header count varint, headers (key length varint, key bytes, value
 * length varint (-1 = null), value bytes). Varints are LEB128 of the zigzag value (at most 5
 * bytes; the varlong at most 10), compared in zigzag form as `_walk` does: offset delta i is
 * 2i, a length of -1 is 1, odd means negative.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Walks of this many bytes and more let other threads run (the S3 client's, the metadata
 * commit's); below it, handing the GIL over and waiting for it back costs more than the walk.
 * Only immutable bytes are walked without it (a bytearray could change meanwhile). */
#define RELEASE_GIL_BYTES (256 * 1024)

/* One unsigned varint of at most `max_bytes` bytes at *pos, before `end`. Returns 0 when
 * there is none (truncated, too long, or past 64 bits): the caller gives up. */
static inline int
read_uvarint(const uint8_t *d, Py_ssize_t end, Py_ssize_t *pos, int max_bytes, uint64_t *out)
{
    Py_ssize_t p = *pos;
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end)
            return 0;
        uint64_t b = d[p++];
        if (shift == 63 && (b & 0x7F) > 1)
            return 0; /* more than 64 bits: Python's ints hold it, leave it to `_walk` */
        result |= (b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = result;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* pos + skip, or -1 when that is past `end` (then the next read would fail anyway). */
static inline Py_ssize_t
advance(Py_ssize_t pos, uint64_t skip, Py_ssize_t end)
{
    if (skip > (uint64_t)(end - pos))
        return -1;
    return pos + (Py_ssize_t)skip;
}

/* The headers of one record; `zz_count` is the zigzag count. New position, or -1. */
static Py_ssize_t
skip_headers(const uint8_t *d, Py_ssize_t end, Py_ssize_t pos, uint64_t zz_count)
{
    uint64_t v;
    if (zz_count & 1)
        return -1;
    for (uint64_t h = 0; h < (zz_count >> 1); h++) {
        if (!read_uvarint(d, end, &pos, 5, &v) || (v & 1))
            return -1;
        if ((pos = advance(pos, v >> 1, end)) < 0)
            return -1;
        if (!read_uvarint(d, end, &pos, 5, &v))
            return -1;
        if (v & 1) {
            if (v != 1)
                return -1;
        } else if ((pos = advance(pos, v >> 1, end)) < 0) {
            return -1;
        }
    }
    return pos;
}

/* The walk itself: 1, *max_zz and *odd (the OR of every zigzag delta: bit 0 set iff a delta is
   negative) on success, 0 on anything `_walk` would refuse. */
static int
walk_records(const uint8_t *d, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t count, int keys_required,
             uint64_t *max_zz, uint64_t *odd)
{
    uint64_t v, best = 0, ors = 0, expected = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!read_uvarint(d, end, &pos, 5, &v) || (v & 1))
            return 0;
        Py_ssize_t rec_end = advance(pos, v >> 1, end);
        if (rec_end < 0 || pos + 1 >= end) /* the record, or its attributes byte, runs past */
            return 0;
        pos += 1; /* attributes (int8, unused) */
        if (!read_uvarint(d, end, &pos, 10, &v))
            return 0;
        if (v > best)
            best = v;
        ors |= v;
        if (!read_uvarint(d, end, &pos, 5, &v) || v != expected)
            return 0;
        expected += 2;
        if (pos >= end)
            return 0;
        if (d[pos] == 1) { /* null key: only the one-byte form, as in `_walk` */
            if (keys_required)
                return 0;
            pos += 1;
        } else if (!read_uvarint(d, end, &pos, 5, &v) || (v & 1) ||
                   (pos = advance(pos, v >> 1, end)) < 0) {
            return 0;
        }
        if (!read_uvarint(d, end, &pos, 5, &v))
            return 0;
        if (v & 1) {
            if (v != 1)
                return 0;
        } else if ((pos = advance(pos, v >> 1, end)) < 0) {
            return 0;
        }
        if (pos >= end)
            return 0;
        if (d[pos]) {
            if (!read_uvarint(d, end, &pos, 5, &v) || (pos = skip_headers(d, end, pos, v)) < 0)
                return 0;
        } else {
            pos += 1;
        }
        if (pos != rec_end)
            return 0;
    }
    if (pos != end)
        return 0;
    *max_zz = best;
    *odd = ors;
    return 1;
}

static PyObject *
speedups_walk(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, count;
    int keys_required, ok;
    uint64_t max_zz = 0, odd = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnp:walk", &buf, &pos, &count, &keys_required))
        return NULL;
    if (pos < 0 || pos > buf.len || count <= 0) {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    if (buf.len - pos >= RELEASE_GIL_BYTES && PyBytes_Check(buf.obj)) {
        Py_BEGIN_ALLOW_THREADS
        ok = walk_records((const uint8_t *)buf.buf, buf.len, pos, count, keys_required, &max_zz, &odd);
        Py_END_ALLOW_THREADS
    } else {
        ok = walk_records((const uint8_t *)buf.buf, buf.len, pos, count, keys_required, &max_zz, &odd);
    }
    PyBuffer_Release(&buf);
    if (!ok)
        Py_RETURN_NONE;
    PyObject *best = PyLong_FromUnsignedLongLong(max_zz);
    if (best == NULL)
        return NULL;
    PyObject *out = PyTuple_Pack(2, best, (odd & 1) ? Py_True : Py_False); /* no format parsing */
    Py_DECREF(best);
    return out;
}

static PyMethodDef speedups_methods[] = {
    {"walk", speedups_walk, METH_VARARGS,
     "walk(data, pos, count, keys_required) -> (int, bool) | None: the largest zigzag timestamp "
     "delta and whether any delta is negative, of `count` well-formed records from `pos` to the end of `data`, or None (ask log_validator._walk)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Compiled twin of skiff.fileformat.log_validator._walk (see the C source's header).", -1,
    speedups_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModule_Create(&speedups_module);
}
