/* bench/compiled_parse.py's candidate: a strict parse of ranked lists into flat arrays.
 *
 * Input: many JSON arrays `[{"item": "<id>", "score": <number>}, ...]`, one per line.
 * Output: a 64-bit FNV-1a hash of each entry's id bytes, its score, and each list's end
 * index. Anything outside that shape (an escape in an id, another key or key order, a
 * nested value, too many entries) stops the parse and returns -(1 + the list's index),
 * for the full parser to read that list: the fast path only has to be right on what it
 * accepts. Not built into the monitor: it measures what compiled decoding would give. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const double POW10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

static const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static const char *expect(const char *p, const char *e, const char *s, size_t n) {
    p = skip_ws(p, e);
    if ((size_t)(e - p) < n || memcmp(p, s, n) != 0) return NULL;
    return skip_ws(p + n, e);
}

/* Clinger's fast path (Clinger 1990, "How to read floating point numbers accurately"):
 * a decimal of at most 15 significant digits and no exponent is m / 10^k with both
 * exact doubles, so one IEEE division is correctly rounded. Else strtod (glibc's is
 * correctly rounded). NULL: not a JSON number. */
static const char *number(const char *p, const char *e, double *out) {
    const char *start = p;
    int neg = 0, digits = 0, frac = 0;
    uint64_t m = 0;
    if (p < e && *p == '-') neg = 1, p++;
    const char *int_start = p;
    while (p < e && *p >= '0' && *p <= '9') m = m * 10 + (uint64_t)(*p++ - '0'), digits++;
    if (p == int_start || (digits > 1 && *int_start == '0')) return NULL;
    if (p < e && *p == '.') {
        const char *f = ++p;
        while (p < e && *p >= '0' && *p <= '9') m = m * 10 + (uint64_t)(*p++ - '0'), digits++, frac++;
        if (p == f) return NULL;
    }
    if ((p < e && (*p == 'e' || *p == 'E')) || digits > 15) {
        char *end;
        *out = strtod(start, &end);
        return end <= e ? end : NULL;
    }
    double v = (double)m / POW10[frac];
    *out = neg ? -v : v;
    return p;
}

long parse_lists(const char *buf, size_t len, uint64_t *hash, double *score,
                 int64_t *ends, size_t cap_items, size_t cap_lists) {
    const char *p = buf, *e = buf + len;
    size_t n = 0, lists = 0;
    while (p < e && lists < cap_lists) {
        const char *le = memchr(p, '\n', (size_t)(e - p));
        if (!le) le = e;
        long refuse = -(long)(lists + 1);
        const char *q = expect(p, le, "[", 1);
        if (!q) return refuse;
        if (q < le && *q == ']') {
            q++;
        } else {
            for (;;) {
                if (n >= cap_items) return refuse;
                if (!(q = expect(q, le, "{", 1)) || !(q = expect(q, le, "\"item\"", 6)) ||
                    !(q = expect(q, le, ":", 1)) || q >= le || *q != '"')
                    return refuse;
                uint64_t h = 1469598103934665603ULL;
                const char *id = ++q;
                while (q < le && *q != '"') {
                    unsigned char c = (unsigned char)*q++;
                    if (c == '\\' || c < 0x20) return refuse;
                    h = (h ^ c) * 1099511628211ULL;
                }
                if (q >= le || q == id) return refuse;
                double v;
                if (!(q = expect(q + 1, le, ",", 1)) || !(q = expect(q, le, "\"score\"", 7)) ||
                    !(q = expect(q, le, ":", 1)) || !(q = number(q, le, &v)) ||
                    !(q = expect(q, le, "}", 1)))
                    return refuse;
                hash[n] = h;
                score[n++] = v;
                if (q < le && *q == ',') { q++; continue; }
                if (q < le && *q == ']') { q++; break; }
                return refuse;
            }
        }
        if (skip_ws(q, le) != le) return refuse;
        ends[lists++] = (int64_t)n;
        p = le + 1;
    }
    return (long)lists;
}
