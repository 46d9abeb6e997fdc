/* The bulk scanner's loop (src/psmatch/core/bulk_scan.py): texts that are conjunctions of
 * integer comparisons, read a byte at a time into comparison columns. */
#include "args.h"

static const Spec scan_specs[] = {
    {"data", UNSIGNED, 1, 0, 1},     {"rejected", UNSIGNED, 1, 1, 1},
    {"text_of", SIGNED, 8, 1, 1},    {"name_start", SIGNED, 8, 1, 1},
    {"name_length", SIGNED, 8, 1, 1}, {"name_hash", SIGNED, 8, 1, 1},
    {"op", SIGNED, 1, 1, 1},         {"value", SIGNED, 8, 1, 1},
    {"high", SIGNED, 8, 1, 1},
};

enum { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_BETWEEN, OP_NOT_BETWEEN };

static inline int
name_start_byte(uint8_t c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static inline int
name_byte(uint8_t c)
{
    return name_start_byte(c) || (c >= '0' && c <= '9');
}

/* Whether the bytes at p (before end) spell word (lower case) in any case, followed by a
 * byte that is not a letter. */
static inline int
word_at(const uint8_t *p, const uint8_t *end, const char *word)
{
    Py_ssize_t n = (Py_ssize_t)strlen(word);
    if (end - p < n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((p[i] | 0x20) != (uint8_t)word[i])
            return 0;
    return p + n == end || !name_byte(p[n]);
}

/* An integer of 1 to 18 digits with an optional sign at *pp, followed by a space or the
 * newline: its value, *pp moved past it; 0 if there is none. */
static inline int
integer_at(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    int negative = 0;
    if (p < end && (*p == '+' || *p == '-'))
        negative = *p++ == '-';
    const uint8_t *digits = p;
    int64_t value = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - digits < 18)
        value = value * 10 + (*p++ - '0');
    if (p == digits || p == end || (*p != ' ' && *p != '\n'))
        return 0;
    *out = negative ? -value : value;
    *pp = p;
    return 1;
}

static inline const uint8_t *
spaces(const uint8_t *p, const uint8_t *end)
{
    while (p < end && *p == ' ')
        p++;
    return p;
}

/* scan_comparisons(data, rejected, text_of, name_start, name_length, name_hash, op, value,
 * high) -> count: data holds texts, each ended by a newline (len(rejected) of them). Each
 * text that is comparisons `name op integer` or `name [not] between integer and integer`
 * joined by `and` (keywords in any case, separated by spaces) gets its comparisons
 * written to the columns (from 0, in order: the text's index, the name's offset in data,
 * length and FNV-1a hash, the operator, the integer or low bound and the high bound);
 * any other text gets rejected[t] = 1 and nothing written. Returns the comparisons
 * written. A newline count other than len(rejected), or more comparisons than the
 * columns hold, is a ValueError. */
PyObject *
psk_scan_comparisons(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *func = "scan_comparisons";
    Py_buffer v[COUNT(scan_specs)];
    if (!psk_check_nargs(func, nargs, COUNT(scan_specs)) || !ACQUIRE(func, args, scan_specs, v))
        return NULL;
    const uint8_t *data = U8(v[0]), *end = data + LEN(v[0]);
    uint8_t *rejected = U8(v[1]);
    Py_ssize_t texts = LEN(v[1]), capacity = LEN(v[2]);
    for (int i = 3; i < COUNT(scan_specs); i++)
        if (LEN(v[i]) != capacity)
            return psk_refuse_arg(v, COUNT(scan_specs), func, scan_specs[i].name,
                                  "is not as long as text_of");
    Py_ssize_t lines = 0;
    for (const uint8_t *p = data; p < end; p++)
        lines += *p == '\n';
    if (lines != texts || (LEN(v[0]) && end[-1] != '\n'))
        return psk_refuse_arg(v, COUNT(scan_specs), func, "data",
                              "does not hold one newline-ended text per rejected flag");
    int64_t *text_of = I64(v[2]), *name_start = I64(v[3]), *name_length = I64(v[4]);
    int64_t *name_hash = I64(v[5]), *value = I64(v[7]), *high = I64(v[8]);
    int8_t *op = (int8_t *)v[6].buf;
    Py_ssize_t count = 0, overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *p = data;
    for (Py_ssize_t t = 0; t < texts; t++) {
        Py_ssize_t first = count;
        int ok = 0;
        p = spaces(p, end);
        for (;;) {  /* one comparison and what follows it */
            int64_t low = 0, high_bound = 0;
            if (p == end || !name_start_byte(*p))
                break;
            const uint8_t *name = p;
            while (p < end && name_byte(*p))
                p++;
            while (p + 1 < end && *p == '.' && name_byte(p[1])) {
                p++;
                while (p < end && name_byte(*p))
                    p++;
            }
            uint64_t hash = 14695981039346656037ULL;
            for (const uint8_t *q = name; q < p; q++)
                hash = (hash ^ *q) * 1099511628211ULL;
            const uint8_t *after = p;
            p = spaces(p, end);
            int code;
            if (p < end && (*p == '=' || *p == '!' || *p == '<' || *p == '>')) {
                uint8_t c = *p, d = p + 1 < end ? p[1] : 0;
                if (c == '<' && d == '>') code = OP_NE, p += 2;
                else if (c == '!' && d == '=') code = OP_NE, p += 2;
                else if (c == '=' && d == '=') code = OP_EQ, p += 2;
                else if (c == '<' && d == '=') code = OP_LE, p += 2;
                else if (c == '>' && d == '=') code = OP_GE, p += 2;
                else if (c == '=') code = OP_EQ, p += 1;
                else if (c == '<') code = OP_LT, p += 1;
                else if (c == '>') code = OP_GT, p += 1;
                else break;
                p = spaces(p, end);
                if (!integer_at(&p, end, &low))
                    break;
            } else {
                if (p == after)
                    break;  /* a name then a word needs a space between */
                code = OP_BETWEEN;
                if (word_at(p, end, "not")) {
                    const uint8_t *q = spaces(p + 3, end);
                    if (q == p + 3)
                        break;
                    p = q;
                    code = OP_NOT_BETWEEN;
                }
                if (!word_at(p, end, "between"))
                    break;
                const uint8_t *q = spaces(p + 7, end);
                if (q == p + 7 || !integer_at(&q, end, &low))
                    break;
                p = spaces(q, end);
                if (p == q || !word_at(p, end, "and"))
                    break;
                q = spaces(p + 3, end);
                if (q == p + 3 || !integer_at(&q, end, &high_bound))
                    break;
                p = q;
            }
            if (count == capacity) {
                overflow = 1;
                break;
            }
            text_of[count] = t;
            value[count] = low;
            high[count] = high_bound;
            name_start[count] = name - data;
            name_length[count] = after - name;
            name_hash[count] = (int64_t)hash;
            op[count] = (int8_t)code;
            count++;
            const uint8_t *q = spaces(p, end);
            if (q < end && *q == '\n') {
                p = q;
                ok = 1;
                break;
            }
            if (q == p || !word_at(q, end, "and"))
                break;
            p = spaces(q + 3, end);
            if (p == q + 3)
                break;
        }
        if (overflow)
            break;
        if (!ok) {
            count = first;
            rejected[t] = 1;
        }
        while (p < end && *p != '\n')  /* to the text's end */
            p++;
        p++;
    }
    Py_END_ALLOW_THREADS
    if (overflow)
        return psk_refuse_arg(v, COUNT(scan_specs), func, "text_of",
                              "cannot hold every comparison");
    psk_release(v, COUNT(scan_specs));
    return PyLong_FromSsize_t(count);
}
