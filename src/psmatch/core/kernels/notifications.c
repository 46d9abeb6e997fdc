/* The notification heads' assembly (its Python face: src/psmatch/service/heads.py): the
 * lengths of byte strings written as JSON strings, and the notifications' bytes. */
#include "args.h"

static const uint8_t json_escape_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
};

/* Write data[0:n] as a JSON string, quotes included, at out; return the end. */
static uint8_t *
write_json_string(uint8_t *out, const uint8_t *data, int64_t n)
{
    static const char hex[] = "0123456789abcdef";
    *out++ = '"';
    for (int64_t j = 0; j < n; j++) {
        uint8_t b = data[j];
        switch (json_escape_extra[b]) {
        case 0:
            *out++ = b;
            break;
        case 1:
            *out++ = '\\';
            *out++ = b == '\b' ? 'b' : b == '\t' ? 't' : b == '\n' ? 'n' : b == '\f' ? 'f'
                   : b == '\r' ? 'r' : b;
            break;
        default:
            memcpy(out, "\\u00", 4);
            out[4] = hex[b >> 4];
            out[5] = hex[b & 15];
            out += 6;
        }
    }
    *out++ = '"';
    return out;
}

static const Spec json_length_specs[] = {
    {"data", UNSIGNED, 1, 0, 1}, {"offsets", SIGNED, 8, 0, 1}, {"out", SIGNED, 8, 1, 1},
};

/* out[i] = the length of data[offsets[i]:offsets[i + 1]] written as a JSON string. */
PyObject *
psk_json_string_lengths(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(json_length_specs)];
    if (!psk_check_nargs("json_string_lengths", nargs, COUNT(json_length_specs))
        || !ACQUIRE("json_string_lengths", args, json_length_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]);
    const int64_t *offsets = I64(v[1]);
    int64_t *out = I64(v[2]);
    Py_ssize_t n = LEN(v[2]);
    if (LEN(v[1]) < n + 1)
        return psk_refuse(v, COUNT(json_length_specs),
                          "json_string_lengths(): offsets is not longer than out");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t length = 2 + offsets[i + 1] - offsets[i];
        for (int64_t j = offsets[i]; j < offsets[i + 1]; j++)
            length += json_escape_extra[data[j]];
        out[i] = length;
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(json_length_specs));
    Py_RETURN_NONE;
}

static const Spec notification_specs[] = {
    {"prefix", UNSIGNED, 1, 0, 1}, {"id_offsets", SIGNED, 8, 0, 1},
    {"id_data", UNSIGNED, 1, 0, 1}, {"subscriber_key", UNSIGNED, 1, 0, 1},
    {"repeat_id", BOOL, 1, 0, 1}, {"head_data", UNSIGNED, 1, 0, 1},
    {"head_lo", SIGNED, 8, 0, 1}, {"head_hi", SIGNED, 8, 0, 1},
    {"tail_offsets", SIGNED, 8, 0, 1}, {"tail_data", UNSIGNED, 1, 0, 1},
    {"tail_rows", SIGNED, 8, 0, 1}, {"out_offsets", SIGNED, 8, 0, 1},
    {"out", UNSIGNED, 1, 1, 1},
};

/* out[out_offsets[i]:] = prefix, row i of the ids' CSR column as a JSON string (and
 * again after subscriber_key if repeat_id[i]), head_data[head_lo[i]:head_hi[i]] and row
 * tail_rows[i] of the tails' CSR column, for every i. */
PyObject *
psk_join_notifications(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer v[COUNT(notification_specs)];
    if (!psk_check_nargs("join_notifications", nargs, COUNT(notification_specs))
        || !ACQUIRE("join_notifications", args, notification_specs, v))
        return NULL;
    const uint8_t *prefix = U8(v[0]), *id_data = U8(v[2]), *key = U8(v[3]);
    const uint8_t *repeat_id = U8(v[4]), *head_data = U8(v[5]), *tail_data = U8(v[9]);
    const int64_t *id_offsets = I64(v[1]), *head_lo = I64(v[6]), *head_hi = I64(v[7]);
    const int64_t *tail_offsets = I64(v[8]), *tail_rows = I64(v[10]);
    const int64_t *out_offsets = I64(v[11]);
    uint8_t *out = U8(v[12]);
    Py_ssize_t n = LEN(v[6]), prefix_length = LEN(v[0]), key_length = LEN(v[3]);
    if (LEN(v[1]) < n + 1 || LEN(v[4]) != n || LEN(v[7]) != n || LEN(v[10]) != n
        || LEN(v[11]) < n)
        return psk_refuse(v, COUNT(notification_specs), "join_notifications(): repeat_id, "
                          "head_lo, head_hi and tail_rows differ in length, or id_offsets or "
                          "out_offsets is shorter");
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *at = out + out_offsets[i];
        int64_t head = head_hi[i] - head_lo[i], row = tail_rows[i];
        const uint8_t *sub_id = id_data + id_offsets[i];
        int64_t id_length = id_offsets[i + 1] - id_offsets[i];
        memcpy(at, prefix, prefix_length);
        at = write_json_string(at + prefix_length, sub_id, id_length);
        if (repeat_id[i]) {
            memcpy(at, key, key_length);
            at = write_json_string(at + key_length, sub_id, id_length);
        }
        memcpy(at, head_data + head_lo[i], head);
        memcpy(at + head, tail_data + tail_offsets[row], tail_offsets[row + 1] - tail_offsets[row]);
    }
    Py_END_ALLOW_THREADS
    psk_release(v, COUNT(notification_specs));
    Py_RETURN_NONE;
}
