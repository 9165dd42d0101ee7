/* The client's optional compiled hot loop (issue 20; docs/metrics.md, "The compiled hot loop").
 *
 * Each function or type is the C twin of pure-Python code that stays the reference and the fallback:
 *
 *   Reader(transport, fd, size, protocol, clock, http1)   kstamp.KernelStampTransport._read_ready, whole: the loop's
 *                                                   reader callback (read, stamp, frame, account; no Python frame)
 *   recv_stamped(sock, fd, size)                    kstamp._recv_stamped_py: recvmsg + SCM_TIMESTAMPNS, then
 *                                                   perf_counter_ns (CLOCK_MONOTONIC)
 *   stamp(clock, realtime_ns, read_ns, floor_ns)    kstamp.RealtimeMap.stamp
 *   receive(conn, data, now)                        http1_conn.Http1Connection.data_received_at (its push fast path
 *                                                   here, the rest in conn._receive_general)
 *   push(data, now, handler) -> (consumed, done)    http1_conn._push_frames_py: the whole chunks at a read's start
 *   Poller()                                        kstamp._PollerPy: the kernel-stamped sockets' own epoll set,
 *                                                   each ready socket's reader called by poll() (read batching)
 *   Sink(parser, st, count_tokens, t0)              openai.execute's push-mode handler (on_data)
 *   event(chunk, now, parser, st, count_tokens)     push_handler's closure body: the SSE one-whole-event path,
 *                                                   then consume
 *   consume(payloads, now, st, count_tokens)        openai._consume_py: account one read's data payloads; each
 *                                                   payload read by the event scanner below, else by orjson
 *
 * Every branch does what the Python twin does, including the exceptions it raises (type and message), so records are
 * identical by construction; tests/unit/client/test_hot.py runs both on the same inputs and compares. Objects of
 * unexpected JSON types go through the generic object protocol (PyObject_CallMethod "get", PyObject_GetItem,
 * PyObject_IsTrue) exactly as Python would treat them; only exact dicts and lists take the direct C calls.
 *
 * ABI: bump HOT_ABI (and tailscope.client.hot.ABI) when a signature changes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HOT_ABI 5
#ifndef HOT_SOURCE_DIGEST
#define HOT_SOURCE_DIGEST ""
#endif
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif

/* set by configure(): orjson.loads, orjson.JSONDecodeError, openai._MalformedEvent, openai._ServerErrorEvent */
static PyObject *g_loads, *g_decode_error, *g_malformed, *g_server_error;
static PyObject *g_one, *g_done_marker;
static int g_scan = 1; /* the event scanner before orjson (set_scan(False): orjson for every payload) */
static PyObject *s_get, *s_append, *s_feed_data, *s_buf, *s_data;
static PyObject *s_first_event, *s_done, *s_request_id, *s_input_tokens, *s_completion_tokens, *s_cached_tokens;
static PyObject *s_reasoning_usage, *s_finished, *s_first_answer, *s_chunk_times, *s_texts, *s_usage_per_chunk;
static PyObject *s_last_usage_completion, *s_chunk_tokens, *s_reasoning;
static PyObject *s_handler, *s__chunked, *s__chunk_state, *s__line, *s_pieces, *s__fail, *s__wake, *s_handler_done;
static PyObject *s__receive_general, *s_user, *s_kernel, *s_clamped, *s_next_sync_ns, *s__offset, *s_offset_ns;
static PyObject *s_resync_ns, *s__force_close, *s_sent_ns, *s_data_received_at;
static PyObject *k_choices, *k_usage, *k_id, *k_completion_tokens, *k_prompt_tokens, *k_prompt_tokens_details;
static PyObject *k_cached_tokens, *k_completion_tokens_details, *k_reasoning_tokens, *k_error, *k_message;
static PyObject *k_finish_reason, *k_delta, *k_content, *k_reasoning_content, *k_reasoning, *k_text;

/* obj.get(key) as Python would do it: a new reference, NULL with an exception set (e.g. AttributeError on a list) */
static PyObject *get(PyObject *obj, PyObject *key) {
    if (PyDict_CheckExact(obj)) {
        PyObject *v = PyDict_GetItemWithError(obj, key);
        if (v == NULL) {
            if (PyErr_Occurred()) return NULL;
            Py_RETURN_NONE;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_CallMethodOneArg(obj, s_get, key);
}

/* *out = obj.get(key) (a new reference, NULL on error); its truth value, -1 on error */
static int get_truth(PyObject *obj, PyObject *key, PyObject **out) {
    *out = get(obj, key);
    return *out == NULL ? -1 : PyObject_IsTrue(*out);
}

static int set_attr(PyObject *o, PyObject *name, PyObject *v) { return PyObject_SetAttr(o, name, v); }

/* st.<name> is None */
static int attr_is_none(PyObject *st, PyObject *name) {
    PyObject *v = PyObject_GetAttr(st, name);
    if (v == NULL) return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

static int append_to(PyObject *st, PyObject *name, PyObject *item) {
    PyObject *seq = PyObject_GetAttr(st, name);
    if (seq == NULL) return -1;
    int r;
    if (PyList_CheckExact(seq)) {
        r = PyList_Append(seq, item);
    } else {
        PyObject *res = PyObject_CallMethodOneArg(seq, s_append, item);
        r = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(seq);
    return r;
}

/* raise cls(f"{prefix}{data[:120]!r}") */
static void raise_data(PyObject *cls, const char *prefix, PyObject *data) {
    PyObject *head = PySequence_GetSlice(data, 0, 120);
    if (head == NULL) return;
    PyObject *msg = PyUnicode_FromFormat("%s%R", prefix, head);
    Py_DECREF(head);
    if (msg == NULL) return;
    PyErr_SetObject(cls, msg);
    Py_DECREF(msg);
}

/* type(v) is int (bool excluded, as Python's exact type test does) */
#define EXACT_INT(v) ((v) != NULL && Py_IS_TYPE((v), &PyLong_Type))

/* The usage block of one event; *ct_out gets a new reference to completion_tokens when it is an int, else NULL. */
static int account_usage(PyObject *usage, PyObject *st, PyObject **ct_out) {
    *ct_out = NULL;
    PyObject *ct = get(usage, k_completion_tokens);
    if (ct == NULL) return -1;
    PyObject *pt = get(usage, k_prompt_tokens);
    if (pt == NULL) goto fail_ct;
    if (EXACT_INT(pt) && set_attr(st, s_input_tokens, pt) < 0) goto fail_pt;
    if (EXACT_INT(ct)) {
        if (set_attr(st, s_completion_tokens, ct) < 0) goto fail_pt;
        *ct_out = ct;
        ct = NULL;
    } else {
        Py_CLEAR(ct);
    }
    Py_DECREF(pt);
    const struct { PyObject *outer, *inner, *attr; } details[2] = {
        {k_prompt_tokens_details, k_cached_tokens, s_cached_tokens},
        {k_completion_tokens_details, k_reasoning_tokens, s_reasoning_usage},
    };
    for (int i = 0; i < 2; i++) {
        PyObject *d = get(usage, details[i].outer);
        if (d == NULL) goto fail_out;
        int truth = PyObject_IsTrue(d);
        if (truth < 0) {
            Py_DECREF(d);
            goto fail_out;
        }
        if (truth) {
            PyObject *v = get(d, details[i].inner);
            Py_DECREF(d);
            if (v == NULL) goto fail_out;
            if (EXACT_INT(v) && set_attr(st, details[i].attr, v) < 0) {
                Py_DECREF(v);
                goto fail_out;
            }
            Py_DECREF(v);
        } else {
            Py_DECREF(d);
        }
    }
    return 0;
fail_pt:
    Py_DECREF(pt);
fail_ct:
    Py_XDECREF(ct);
    return -1;
fail_out:
    Py_CLEAR(*ct_out);
    return -1;
}


/* -- the event scanner: the fields the accounting reads, from a strict subset of JSON --------------------------------
 *
 * consume_one decodes each data payload and reads a few fields of it. Decoding the whole object (orjson: every key,
 * every value) costs most of an event's accounting, so this scanner first tries a strict subset of JSON and builds a
 * *minimal* object holding only what the walk reads: the top-level "choices" (the first choice only: its
 * finish_reason's truth, its delta's content / reasoning_content / reasoning, its text), "usage" (its integer
 * completion_tokens and prompt_tokens, prompt_tokens_details.cached_tokens, completion_tokens_details.reasoning_tokens)
 * and "id". The walk over the minimal object has the same effects as over the whole one. Anything outside the subset
 * — a non-ASCII byte, a \u escape, an exponent, a long number, a key with an escape, a needed key twice, a needed
 * field of an unexpected type, an "error" key, deep nesting, anything invalid — returns "bail" and the payload goes to
 * orjson as before, so errors and odd shapes are reported exactly as without the scanner.
 */
typedef struct {
    const char *p, *end;
    int depth;
} Scan;

#define BAIL 1

static void ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

#define MORE 2

/* after a member or an element: MORE at ',' (another follows), 0 at close (consumed: the container ends), BAIL */
static int next_or_close(Scan *s, char close) {
    ws(s);
    if (s->p >= s->end) return BAIL;
    if (*s->p == ',') {
        s->p++;
        ws(s);
        return MORE;
    }
    if (*s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    return BAIL;
}

/* a string at s->p ('"'); *out a new str when out != NULL. 0 ok, BAIL, -1 error */
static int scan_string(Scan *s, PyObject **out) {
    const char *q = s->p + 1;
    int escaped = 0;
    for (;; q++) {
        if (q >= s->end) return BAIL;
        unsigned char c = (unsigned char)*q;
        if (c == '"') break;
        if (c < 0x20 || c >= 0x80) return BAIL;
        if (c == '\\') {
            q++;
            if (q >= s->end) return BAIL;
            switch (*q) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                escaped = 1;
                break;
            default:
                return BAIL; /* \u and anything invalid: orjson's */
            }
        }
    }
    const char *start = s->p + 1;
    Py_ssize_t len = q - start;
    s->p = q + 1;
    if (out == NULL) return 0;
    if (!escaped) {
        *out = PyUnicode_FromStringAndSize(start, len); /* ASCII only: checked above */
        return *out == NULL ? -1 : 0;
    }
    PyObject *u = PyUnicode_New(len, 127);
    if (u == NULL) return -1;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(u);
    Py_ssize_t k = 0;
    for (const char *r = start; r < q; r++) {
        char c = *r;
        if (c == '\\') {
            r++;
            switch (*r) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: c = *r; /* " \ / */
            }
        }
        d[k++] = (Py_UCS1)c;
    }
    if (k != len) { /* shrink to the unescaped length */
        PyObject *v = PyUnicode_Substring(u, 0, k);
        Py_DECREF(u);
        if (v == NULL) return -1;
        u = v;
    }
    *out = u;
    return 0;
}

/* a number at s->p; *out a new int when it is an integer literal (and out != NULL), else left NULL */
static int scan_number(Scan *s, PyObject **out) {
    const char *q = s->p;
    int neg = 0;
    if (q < s->end && *q == '-') {
        neg = 1;
        q++;
    }
    const char *digits = q;
    if (q >= s->end || *q < '0' || *q > '9') return BAIL;
    if (*q == '0') {
        q++;
        if (q < s->end && *q >= '0' && *q <= '9') return BAIL; /* a leading zero */
    } else {
        while (q < s->end && *q >= '0' && *q <= '9') q++;
    }
    Py_ssize_t ndigits = q - digits;
    int integer = 1;
    if (q < s->end && *q == '.') {
        integer = 0;
        q++;
        const char *f = q;
        while (q < s->end && *q >= '0' && *q <= '9') q++;
        if (q == f) return BAIL;
        ndigits += q - f;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) return BAIL;
    if (ndigits > 15) return BAIL;
    if (out != NULL && integer) {
        long long v = 0;
        for (const char *r = digits; r < digits + (q - digits); r++) v = v * 10 + (*r - '0');
        *out = PyLong_FromLongLong(neg ? -v : v);
        if (*out == NULL) return -1;
    }
    s->p = q;
    return 0;
}

static int skip_value(Scan *s);

/* an object or array at s->p, every value validated and dropped */
static int skip_container(Scan *s) {
    char close = *s->p == '{' ? '}' : ']';
    int object = close == '}';
    if (++s->depth > 32) return BAIL;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        int r;
        if (object) {
            if (s->p >= s->end || *s->p != '"') return BAIL;
            if ((r = scan_string(s, NULL)) != 0) return r;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return BAIL;
            s->p++;
            ws(s);
        }
        if ((r = skip_value(s)) != 0) return r;
        if ((r = next_or_close(s, close)) != MORE) return r;
    }
}

static int literal(Scan *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return BAIL;
    s->p += n;
    return 0;
}

static int skip_value(Scan *s) {
    if (s->p >= s->end) return BAIL;
    switch (*s->p) {
    case '"': return scan_string(s, NULL);
    case '{': case '[': return skip_container(s);
    case 't': return literal(s, "true", 4);
    case 'f': return literal(s, "false", 5);
    case 'n': return literal(s, "null", 4);
    default: return scan_number(s, NULL);
    }
}

/* the kind of value at s->p */
enum { V_STRING, V_OBJECT, V_ARRAY, V_NULL, V_OTHER };
static int kind_of(Scan *s) {
    if (s->p >= s->end) return V_OTHER;
    switch (*s->p) {
    case '"': return V_STRING;
    case '{': return V_OBJECT;
    case '[': return V_ARRAY;
    case 'n': return V_NULL;
    default: return V_OTHER;
    }
}

/* One object's members: calls member(s, key, keylen, ctx) for each, which must consume the value. Keys with an
 * escape bail. */
typedef int (*member_fn)(Scan *s, const char *key, Py_ssize_t n, void *ctx);
static int scan_object(Scan *s, member_fn member, void *ctx) {
    if (s->p >= s->end || *s->p != '{') return BAIL;
    if (++s->depth > 32) return BAIL;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->depth--;
        return 0;
    }
    for (;;) {
        if (s->p >= s->end || *s->p != '"') return BAIL;
        const char *k = s->p + 1, *q = k;
        while (q < s->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20 && (unsigned char)*q < 0x80) q++;
        if (q >= s->end || *q != '"') return BAIL;
        s->p = q + 1;
        ws(s);
        if (s->p >= s->end || *s->p != ':') return BAIL;
        s->p++;
        ws(s);
        int r = member(s, k, q - k, ctx);
        if (r != 0) return r;
        if ((r = next_or_close(s, '}')) != MORE) return r;
    }
}

#define KEY_IS(k, n, lit) ((n) == (Py_ssize_t)(sizeof(lit) - 1) && memcmp((k), (lit), (n)) == 0)

/* What the scanner keeps of one event: the fields the accounting reads, each a new reference or NULL (absent, null,
 * or — for the integers — not an integer, which the walk ignores alike). `seen` has a bit per field and per
 * container on the kept path: a second occurrence bails (orjson would keep the last one). */
enum { F_ID, F_CT, F_PT, F_CACHED, F_RTOK, F_CONTENT, F_RCONTENT, F_REASONING, F_TEXT, NF };
enum { C_CHOICES = NF, C_USAGE, C_PTD, C_CTD, C_FINISH, C_DELTA };
typedef struct {
    PyObject *v[NF];
    unsigned seen;
    int want_id;
    int choices; /* the choices array has a first element (an object) */
    int finish;  /* its finish_reason is a non-empty string */
    int delta;   /* it has a delta object */
} Ev;

/* mark bit as seen; BAIL when it was already */
static int first_time(Ev *e, int bit) {
    if (e->seen & (1u << bit)) return BAIL;
    e->seen |= 1u << bit;
    return 0;
}

/* a string or null field: the string kept, null left out; anything else bails */
static int text_field(Scan *s, Ev *e, int f) {
    if (first_time(e, f)) return BAIL;
    int k = kind_of(s);
    if (k == V_NULL) return literal(s, "null", 4);
    if (k != V_STRING) return BAIL;
    return scan_string(s, &e->v[f]);
}

/* an integer field kept; any other value is validated and left out (the walk ignores non-ints) */
static int int_field(Scan *s, Ev *e, int f) {
    if (first_time(e, f)) return BAIL;
    if (s->p < s->end && (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))) return scan_number(s, &e->v[f]);
    return skip_value(s);
}

/* an object member scanned by member, or null (left out: the walk reads a missing key and a null one alike);
 * anything else bails (a truthy non-object would raise in the walk: orjson's path says how) */
static int object_field(Scan *s, Ev *e, int bit, member_fn member, int *present) {
    if (first_time(e, bit)) return BAIL;
    int kind = kind_of(s);
    if (kind == V_NULL) return literal(s, "null", 4);
    if (kind != V_OBJECT) return BAIL;
    if (present != NULL) *present = 1;
    return scan_object(s, member, e);
}

static int delta_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    Ev *e = (Ev *)ctx;
    if (KEY_IS(k, n, "content")) return text_field(s, e, F_CONTENT);
    if (KEY_IS(k, n, "reasoning_content")) return text_field(s, e, F_RCONTENT);
    if (KEY_IS(k, n, "reasoning")) return text_field(s, e, F_REASONING);
    return skip_value(s);
}

static int choice_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    Ev *e = (Ev *)ctx;
    if (KEY_IS(k, n, "finish_reason")) {
        if (first_time(e, C_FINISH)) return BAIL;
        int kind = kind_of(s);
        if (kind == V_NULL) return literal(s, "null", 4);
        if (kind != V_STRING) return BAIL;
        const char *before = s->p;
        int r = scan_string(s, NULL);
        e->finish = s->p - before > 2; /* "" is falsy */
        return r;
    }
    if (KEY_IS(k, n, "delta")) return object_field(s, e, C_DELTA, delta_member, &e->delta);
    if (KEY_IS(k, n, "text")) return text_field(s, e, F_TEXT);
    return skip_value(s);
}

static int ptd_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    return KEY_IS(k, n, "cached_tokens") ? int_field(s, (Ev *)ctx, F_CACHED) : skip_value(s);
}

static int ctd_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    return KEY_IS(k, n, "reasoning_tokens") ? int_field(s, (Ev *)ctx, F_RTOK) : skip_value(s);
}

static int usage_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    Ev *e = (Ev *)ctx;
    if (KEY_IS(k, n, "completion_tokens")) return int_field(s, e, F_CT);
    if (KEY_IS(k, n, "prompt_tokens")) return int_field(s, e, F_PT);
    if (KEY_IS(k, n, "prompt_tokens_details")) return object_field(s, e, C_PTD, ptd_member, NULL);
    if (KEY_IS(k, n, "completion_tokens_details")) return object_field(s, e, C_CTD, ctd_member, NULL);
    return skip_value(s);
}

static int top_member(Scan *s, const char *k, Py_ssize_t n, void *ctx) {
    Ev *e = (Ev *)ctx;
    if (KEY_IS(k, n, "choices")) {
        if (first_time(e, C_CHOICES)) return BAIL;
        int kind = kind_of(s);
        if (kind == V_NULL) return literal(s, "null", 4); /* as good as missing for the walk */
        if (kind != V_ARRAY || ++s->depth > 32) return BAIL;
        s->p++;
        ws(s);
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            s->depth--;
            return 0;
        }
        /* the first choice: kept (it must be an object); the others validated and dropped */
        if (kind_of(s) != V_OBJECT) return BAIL;
        e->choices = 1;
        int r = scan_object(s, choice_member, e);
        while (r == 0 && (r = next_or_close(s, ']')) == MORE) r = skip_value(s);
        return r;
    }
    if (KEY_IS(k, n, "usage")) return object_field(s, e, C_USAGE, usage_member, NULL);
    if (KEY_IS(k, n, "id")) {
        if (first_time(e, F_ID)) return BAIL;
        return e->want_id && kind_of(s) == V_STRING ? scan_string(s, &e->v[F_ID]) : skip_value(s);
    }
    if (KEY_IS(k, n, "error")) return BAIL; /* its value is reported verbatim: orjson's */
    return skip_value(s);
}

static void ev_clear(Ev *e) {
    for (int i = 0; i < NF; i++) Py_CLEAR(e->v[i]);
}

/* Scan one payload into *e: 0 (e filled: clear it after), BAIL (e cleared: orjson decides), -1 (error set) */
static int scan_event(PyObject *data, int want_id, Ev *e) {
    memset(e, 0, sizeof *e);
    e->want_id = want_id;
    if (!PyBytes_CheckExact(data)) return BAIL;
    Scan s = {PyBytes_AS_STRING(data), PyBytes_AS_STRING(data) + PyBytes_GET_SIZE(data), 0};
    ws(&s);
    int r = scan_object(&s, top_member, e);
    if (r == 0) {
        ws(&s);
        if (s.p != s.end) r = BAIL;
    }
    if (r != 0) ev_clear(e);
    return r;
}

/* A token-bearing event's accounting (text is truthy; ct the event's integer usage.completion_tokens or NULL):
 * the tail of _consume_py's loop, shared by the scanned and the decoded paths. 0, or -1 with an exception set. */
static int account_text(PyObject *st, PyObject *now, PyObject *text, PyObject *ct, int reasoning,
                        PyObject *count_tokens) {
    PyObject *k = NULL;
    if (!reasoning) {
        int none = attr_is_none(st, s_first_answer);
        if (none < 0) goto fail;
        if (none && set_attr(st, s_first_answer, now) < 0) goto fail;
    }
    if (append_to(st, s_chunk_times, now) < 0) goto fail;
    if (append_to(st, s_texts, text) < 0) goto fail;
    if (ct != NULL) {
        if (set_attr(st, s_usage_per_chunk, Py_True) < 0) goto fail;
        PyObject *last = PyObject_GetAttr(st, s_last_usage_completion);
        if (last == NULL) goto fail;
        k = PyNumber_Subtract(ct, last);
        Py_DECREF(last);
        if (k == NULL) goto fail;
        int gt = PyObject_RichCompareBool(k, g_one, Py_GT);
        if (gt < 0) goto fail;
        if (!gt) Py_SETREF(k, Py_NewRef(g_one));
        if (append_to(st, s_chunk_tokens, k) < 0) goto fail;
        if (set_attr(st, s_last_usage_completion, ct) < 0) goto fail;
    } else if (count_tokens != Py_None) {
        PyObject *n = PyObject_CallOneArg(count_tokens, text);
        if (n == NULL) goto fail;
        /* max(n, 1): n unless 1 > n */
        int gt = PyObject_RichCompareBool(g_one, n, Py_GT);
        if (gt < 0) {
            Py_DECREF(n);
            goto fail;
        }
        k = gt ? Py_NewRef(g_one) : Py_NewRef(n);
        Py_DECREF(n);
        if (append_to(st, s_chunk_tokens, k) < 0) goto fail;
    } else {
        k = Py_NewRef(g_one);
        if (append_to(st, s_chunk_tokens, k) < 0) goto fail;
    }
    if (reasoning) {
        /* st.reasoning += st.chunk_tokens[-1] */
        PyObject *tokens = PyObject_GetAttr(st, s_chunk_tokens);
        if (tokens == NULL) goto fail;
        PyObject *minus1 = PyLong_FromLong(-1);
        PyObject *last = minus1 ? PyObject_GetItem(tokens, minus1) : NULL;
        Py_XDECREF(minus1);
        Py_DECREF(tokens);
        if (last == NULL) goto fail;
        PyObject *cur = PyObject_GetAttr(st, s_reasoning);
        if (cur == NULL) {
            Py_DECREF(last);
            goto fail;
        }
        PyObject *sum = PyNumber_InPlaceAdd(cur, last);
        Py_DECREF(cur);
        Py_DECREF(last);
        if (sum == NULL) goto fail;
        int r = set_attr(st, s_reasoning, sum);
        Py_DECREF(sum);
        if (r < 0) goto fail;
    }
    Py_XDECREF(k);
    return 0;
fail:
    Py_XDECREF(k);
    return -1;
}

/* The walk of _consume_py over what the scanner kept (every field already of its expected type) */
static int consume_scanned(Ev *e, PyObject *now, PyObject *st, PyObject *count_tokens) {
    static const struct { int f; PyObject **attr; } sets[] = {
        {F_ID, &s_request_id}, {F_PT, &s_input_tokens}, {F_CT, &s_completion_tokens},
        {F_CACHED, &s_cached_tokens}, {F_RTOK, &s_reasoning_usage},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (e->v[sets[i].f] != NULL && set_attr(st, *sets[i].attr, e->v[sets[i].f]) < 0) return -1;
    if (!e->choices) return 0; /* no "error" key (it bails): nothing more to account */
    if (e->finish && set_attr(st, s_finished, Py_True) < 0) return -1;
    PyObject *text;
    int reasoning = 0;
#define EMPTY(t) ((t) == NULL || PyUnicode_GET_LENGTH(t) == 0)
    if (e->delta) {
        text = e->v[F_CONTENT];
        if (EMPTY(text)) {
            reasoning = 1;
            text = EMPTY(e->v[F_RCONTENT]) ? e->v[F_REASONING] : e->v[F_RCONTENT];
        }
    } else {
        text = e->v[F_TEXT];
    }
    if (EMPTY(text)) return 0;
#undef EMPTY
    return account_text(st, now, text, e->v[F_CT], reasoning, count_tokens);
}

/* One data payload; 1 = [DONE] (stop), 0 = go on, -1 = error */
static int consume_one(PyObject *data, PyObject *now, PyObject *st, PyObject *count_tokens) {
    int rc = -1;
    PyObject *obj = NULL, *choices = NULL, *usage = NULL, *ct = NULL, *c0 = NULL, *delta = NULL, *text = NULL;

    if (PyBytes_CheckExact(data) && PyBytes_GET_SIZE(data) == 6 && memcmp(PyBytes_AS_STRING(data), "[DONE]", 6) == 0) {
        return set_attr(st, s_done, Py_True) < 0 ? -1 : 1;
    } else if (!PyBytes_CheckExact(data)) {
        int eq = PyObject_RichCompareBool(data, g_done_marker, Py_EQ);
        if (eq < 0) return -1;
        if (eq) return set_attr(st, s_done, Py_True) < 0 ? -1 : 1;
    }
    int want_id = attr_is_none(st, s_request_id);
    if (want_id < 0) return -1;
    if (g_scan) {
        Ev e;
        int r = scan_event(data, want_id, &e);
        if (r < 0) return -1;
        if (r == 0) {
            r = consume_scanned(&e, now, st, count_tokens);
            ev_clear(&e);
            return r;
        }
    }
    obj = PyObject_CallOneArg(g_loads, data);
    if (obj == NULL) {
        if (PyErr_ExceptionMatches(g_decode_error)) {
            PyErr_Clear();
            raise_data(g_malformed, "data line is not JSON (or not UTF-8): ", data);
        }
        return -1;
    }
    if (!PyDict_CheckExact(obj)) {
        raise_data(g_malformed, "data line is not a JSON object: ", data);
        goto out;
    }
    choices = PyDict_GetItemWithError(obj, k_choices);
    if (choices == NULL && PyErr_Occurred()) goto out;
    choices = choices ? choices : Py_None;
    Py_INCREF(choices);
    usage = PyDict_GetItemWithError(obj, k_usage);
    if (usage == NULL && PyErr_Occurred()) goto out;
    usage = usage ? usage : Py_None;
    Py_INCREF(usage);
    if (want_id) {
        PyObject *rid = PyDict_GetItemWithError(obj, k_id);
        if (rid == NULL && PyErr_Occurred()) goto out;
        if (rid != NULL && PyUnicode_Check(rid) && set_attr(st, s_request_id, rid) < 0) goto out;
    }
    int truth = PyObject_IsTrue(usage);
    if (truth < 0) goto out;
    if (truth && account_usage(usage, st, &ct) < 0) goto out;
    truth = PyObject_IsTrue(choices);
    if (truth < 0) goto out;
    if (!truth) {
        int has = PyDict_Contains(obj, k_error);
        if (has < 0) goto out;
        if (has) {
            PyObject *err = PyDict_GetItemWithError(obj, k_error); /* borrowed */
            if (err == NULL) goto out;
            PyObject *msg;
            if (PyDict_Check(err)) {
                msg = get(err, k_message);
                if (msg == NULL) goto out;
            } else {
                msg = err;
                Py_INCREF(msg);
            }
            PyObject *text_msg = PyUnicode_FromFormat("server sent an error event: %S", msg);
            Py_DECREF(msg);
            if (text_msg != NULL) {
                PyErr_SetObject(g_server_error, text_msg);
                Py_DECREF(text_msg);
            }
            goto out;
        }
        rc = 0;
        goto out;
    }
    if (PyList_CheckExact(choices) && PyList_GET_SIZE(choices) > 0) {
        c0 = PyList_GET_ITEM(choices, 0);
        Py_INCREF(c0);
    } else {
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL) goto out;
        c0 = PyObject_GetItem(choices, zero);
        Py_DECREF(zero);
        if (c0 == NULL) goto out;
    }
    PyObject *fr;
    truth = get_truth(c0, k_finish_reason, &fr);
    Py_XDECREF(fr);
    if (truth < 0) goto out;
    if (truth && set_attr(st, s_finished, Py_True) < 0) goto out;
    delta = get(c0, k_delta);
    if (delta == NULL) goto out;
    int reasoning = 0;
    if (delta != Py_None) {
        truth = get_truth(delta, k_content, &text);
        if (truth < 0) goto out;
        if (!truth) {
            Py_CLEAR(text);
            truth = get_truth(delta, k_reasoning_content, &text);
            if (truth < 0) goto out;
            if (!truth) {
                Py_CLEAR(text);
                text = get(delta, k_reasoning);
                if (text == NULL) goto out;
            }
            reasoning = 1;
        }
    } else {
        text = get(c0, k_text);
        if (text == NULL) goto out;
    }
    truth = PyObject_IsTrue(text);
    if (truth < 0) goto out;
    if (!truth) {
        rc = 0;
        goto out;
    }
    rc = account_text(st, now, text, ct, reasoning, count_tokens);
out:
    Py_XDECREF(obj);
    Py_XDECREF(choices);
    Py_XDECREF(usage);
    Py_XDECREF(ct);
    Py_XDECREF(c0);
    Py_XDECREF(delta);
    Py_XDECREF(text);
    return rc;
}

static int ready(void) {
    if (g_loads == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tailscope.client._hot: configure() was not called");
        return 0;
    }
    return 1;
}

/* st.first_event = now if it is None (the payloads are not empty) */
static int mark_first_event(PyObject *st, PyObject *now) {
    int none = attr_is_none(st, s_first_event);
    if (none < 0) return -1;
    if (none && set_attr(st, s_first_event, now) < 0) return -1;
    return 0;
}

static PyObject *hot_consume(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "consume(payloads, now, st, count_tokens)");
        return NULL;
    }
    if (!ready()) return NULL;
    PyObject *payloads = args[0], *now = args[1], *st = args[2], *count_tokens = args[3];
    PyObject *seq = PySequence_Fast(payloads, "consume: payloads must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > 0 && mark_first_event(st, now) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = consume_one(PySequence_Fast_GET_ITEM(seq, i), now, st, count_tokens);
        if (r < 0) goto fail;
        if (r == 1) break;
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    Py_DECREF(seq);
    return NULL;
}

/* return st.done (the object, as the Python twin returns it) */
static PyObject *done_of(PyObject *st) { return PyObject_GetAttr(st, s_done); }

static PyObject *hot_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "event(chunk, now, parser, st, count_tokens)");
        return NULL;
    }
    if (!ready()) return NULL;
    PyObject *chunk = args[0], *now = args[1], *parser = args[2], *st = args[3], *count_tokens = args[4];
    if (PyBytes_CheckExact(chunk)) {
        const char *p = PyBytes_AS_STRING(chunk);
        Py_ssize_t n = PyBytes_GET_SIZE(chunk);
        /* SSEParser.feed_data's fast path: nothing buffered, "data: ...\n\n" with exactly two LFs and no CR */
        if (n >= 8 && memcmp(p, "data: ", 6) == 0 && p[n - 2] == '\n' && p[n - 1] == '\n' &&
            memchr(p, '\n', n - 2) == NULL && memchr(p, '\r', n) == NULL) {
            PyObject *buf = PyObject_GetAttr(parser, s_buf);
            if (buf == NULL) return NULL;
            int busy = PyObject_IsTrue(buf);
            Py_DECREF(buf);
            if (busy < 0) return NULL;
            if (!busy) {
                PyObject *pending = PyObject_GetAttr(parser, s_data);
                if (pending == NULL) return NULL;
                busy = PyObject_IsTrue(pending);
                Py_DECREF(pending);
                if (busy < 0) return NULL;
            }
            if (!busy) {
                PyObject *payload = PyBytes_FromStringAndSize(p + 6, n - 8);
                if (payload == NULL) return NULL;
                int r = mark_first_event(st, now);
                if (r == 0) r = consume_one(payload, now, st, count_tokens);
                Py_DECREF(payload);
                if (r < 0) return NULL;
                return done_of(st);
            }
        }
    }
    PyObject *payloads = PyObject_CallMethodOneArg(parser, s_feed_data, chunk);
    if (payloads == NULL) return NULL;
    PyObject *cargs[4] = {payloads, now, st, count_tokens};
    PyObject *r = hot_consume(self, cargs, 4);
    Py_DECREF(payloads);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    return done_of(st);
}

/* int(data[i:j], 16) for 0 < j - i <= 8; -1 where Python's int() would raise ValueError */
static long chunk_size(const char *p, Py_ssize_t len) {
    long v = 0;
    Py_ssize_t k;
    for (k = 0; k < len; k++) {
        char c = p[k];
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else break;
        v = v * 16 + d;
    }
    if (k == len) return v;
    /* not plain hex digits: Python's int() also takes signs, whitespace, underscores, a 0x prefix */
    char tmp[16];
    memcpy(tmp, p, (size_t)len);
    tmp[len] = '\0';
    if (memchr(p, '\0', (size_t)len) != NULL) return -1;
    char *end = NULL;
    PyObject *o = PyLong_FromString(tmp, &end, 16);
    if (o == NULL) {
        PyErr_Clear();
        return -1;
    }
    /* trailing whitespace is skipped by PyLong_FromString; anything else left over is an error for int() */
    if (end != tmp + len) {
        Py_DECREF(o);
        return -1;
    }
    long r = PyLong_AsLong(o);
    Py_DECREF(o);
    if (r == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return r <= 0 ? 0 : r; /* <= 0 ends the fast path either way */
}

/* the chunk loop of push(): *consumed and *done set; -1 with the handler's exception set */
static int push_frames(PyObject *data, PyObject *now, PyObject *handler, Py_ssize_t *consumed, int *done) {
    const char *p = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), i = 0;
    *done = 0;
    for (;;) {
        const char *crlf = NULL;
        for (Py_ssize_t q = i; q + 1 < n && q <= i + 8; q++) {
            if (p[q] == '\r' && p[q + 1] == '\n') {
                crlf = p + q;
                break;
            }
        }
        if (crlf == NULL) break;
        Py_ssize_t j = crlf - p;
        if (!(j - i > 0 && j - i <= 8)) break;
        long size = chunk_size(p + i, j - i);
        if (size <= 0) break;
        Py_ssize_t end = j + 2 + size;
        if (end + 2 > n || p[end] != '\r' || p[end + 1] != '\n') break;
        i = end + 2;
        PyObject *piece = PyBytes_FromStringAndSize(p + j + 2, size);
        if (piece == NULL) return -1;
        PyObject *cargs[2] = {now, piece};
        PyObject *r = PyObject_Vectorcall(handler, cargs, 2, NULL);
        Py_DECREF(piece);
        if (r == NULL) return -1;
        int truth = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (truth < 0) return -1;
        if (truth) {
            *done = 1;
            break;
        }
        if (i == n) break;
    }
    *consumed = i;
    return 0;
}

static PyObject *hot_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "push(data, now, handler)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0])) { /* a transport that hands over a bytearray or memoryview: the same bytes */
        PyObject *copy = PyBytes_FromObject(args[0]);
        if (copy == NULL) return NULL;
        PyObject *cargs[3] = {copy, args[1], args[2]};
        PyObject *r = hot_push(self, cargs, 3);
        Py_DECREF(copy);
        return r;
    }
    Py_ssize_t i;
    int done;
    if (push_frames(args[0], args[1], args[2], &i, &done) < 0) return NULL;
    return Py_BuildValue("(nO)", i, done ? Py_True : Py_False);
}

/* call obj.name(*args) and drop the result; -1 on error */
static int call_method(PyObject *obj, PyObject *name, PyObject *const *args, size_t nargs) {
    PyObject *stack[3] = {obj, nargs > 0 ? args[0] : NULL, nargs > 1 ? args[1] : NULL};
    PyObject *r = PyObject_VectorcallMethod(name, stack, (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* the attribute's truth value; -1 on error */
static int attr_truth(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* Http1Connection.data_received_at(conn, data, now): its push-mode fast path here, the rest in
 * conn._receive_general(data, now) as the Python method does */
static int receive(PyObject *conn, PyObject *data, PyObject *now) {
    PyObject *handler = PyObject_GetAttr(conn, s_handler);
    if (handler == NULL) return -1;
    int fast = handler != Py_None && PyBytes_CheckExact(data);
    if (fast) fast = attr_truth(conn, s__chunked);
    if (fast > 0) {
        PyObject *state = PyObject_GetAttr(conn, s__chunk_state);
        if (state == NULL) fast = -1;
        else {
            PyObject *zero = PyLong_FromLong(0);
            fast = zero ? PyObject_RichCompareBool(state, zero, Py_EQ) : -1;
            Py_XDECREF(zero);
            Py_DECREF(state);
        }
    }
    if (fast > 0) fast = attr_truth(conn, s__line) == 0 ? 1 : -1 * (PyErr_Occurred() != NULL);
    if (fast > 0) fast = attr_truth(conn, s_pieces) == 0 ? 1 : -1 * (PyErr_Occurred() != NULL);
    if (fast < 0) {
        Py_DECREF(handler);
        return -1;
    }
    Py_INCREF(data);
    if (fast) {
        Py_ssize_t i;
        int done;
        int r = push_frames(data, now, handler, &i, &done);
        Py_DECREF(handler);
        handler = NULL;
        if (r < 0) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto fail; /* KeyboardInterrupt & co. go up */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyErr_NormalizeException(&type, &value, &tb);
            if (tb != NULL) PyException_SetTraceback(value, tb);
            Py_XDECREF(type);
            Py_XDECREF(tb);
            r = call_method(conn, s__fail, &value, 1);
            Py_DECREF(value);
            if (r < 0 || call_method(conn, s__wake, NULL, 0) < 0) goto fail;
            Py_DECREF(data);
            return 0;
        }
        if (done) {
            if (PyObject_SetAttr(conn, s_handler, Py_None) < 0) goto fail;
            if (PyObject_SetAttr(conn, s_handler_done, Py_True) < 0) goto fail;
            if (call_method(conn, s__wake, NULL, 0) < 0) goto fail;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(data);
        if (i == n) {
            Py_DECREF(data);
            return 0;
        }
        if (i) {
            Py_SETREF(data, PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + i, n - i));
            if (data == NULL) return -1;
        }
    } else {
        Py_DECREF(handler);
    }
    PyObject *args[2] = {data, now};
    int r = call_method(conn, s__receive_general, args, 2);
    Py_DECREF(data);
    return r;
fail:
    Py_XDECREF(handler);
    Py_DECREF(data);
    return -1;
}

static PyObject *hot_receive(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "receive(conn, data, now)");
        return NULL;
    }
    if (receive(args[0], args[1], args[2]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* o.<name> as a long long; -1 with an exception set on error (read it with PyErr_Occurred) */
static int attr_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* o.<name> = value (a new int); -1 on error */
static int set_attr_ll(PyObject *o, PyObject *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int r = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return r;
}

/* RealtimeMap.stamp(clock, realtime_ns | None, read_ns, floor_ns) on long longs; NULL on error */
static PyObject *stamp(PyObject *clock, PyObject *rt, long long read_ns, PyObject *floor) {
    PyObject *counter;
    long long result = read_ns;
    if (rt == Py_None) {
        counter = s_user;
    } else {
        long long rt_ns = PyLong_AsLongLong(rt), next_ns, period_ns, off_ns;
        if (rt_ns == -1 && PyErr_Occurred()) return NULL;
        if (attr_ll(clock, s_next_sync_ns, &next_ns) < 0) return NULL;
        if (read_ns >= next_ns) {
            PyObject *measure = PyObject_GetAttr(clock, s__offset);
            if (measure == NULL) return NULL;
            PyObject *off = PyObject_CallNoArgs(measure);
            Py_DECREF(measure);
            if (off == NULL) return NULL;
            int r = PyObject_SetAttr(clock, s_offset_ns, off);
            Py_DECREF(off);
            if (r < 0 || attr_ll(clock, s_resync_ns, &period_ns) < 0) return NULL;
            if (set_attr_ll(clock, s_next_sync_ns, read_ns + period_ns) < 0) return NULL;
        }
        if (attr_ll(clock, s_offset_ns, &off_ns) < 0) return NULL;
        long long floor_ns = PyLong_AsLongLong(floor);
        if (floor_ns == -1 && PyErr_Occurred()) return NULL;
        long long t = rt_ns - off_ns;
        if (t > read_ns || t < floor_ns) {
            counter = s_clamped;
        } else {
            counter = s_kernel;
            result = t;
        }
    }
    PyObject *c = PyObject_GetAttr(clock, counter);
    if (c == NULL) return NULL;
    PyObject *c1 = PyNumber_Add(c, g_one);
    Py_DECREF(c);
    if (c1 == NULL) return NULL;
    int r = PyObject_SetAttr(clock, counter, c1);
    Py_DECREF(c1);
    if (r < 0) return NULL;
    return PyLong_FromLongLong(result);
}

static PyObject *hot_stamp(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "stamp(clock, realtime_ns, read_ns, floor_ns)");
        return NULL;
    }
    long long read_ns = PyLong_AsLongLong(args[2]);
    if (read_ns == -1 && PyErr_Occurred()) return NULL;
    return stamp(args[0], args[1], read_ns, args[3]);
}

/* one recvmsg: 1 with *data, *rt (new references) and *read_ns set; 0 when nothing is there (EAGAIN, EINTR); -1 with
 * the OSError set */
static int do_recv(int fd, Py_ssize_t size, PyObject **data, PyObject **rt, long long *read_ns) {
    static char buf[256 * 1024];
    if (size <= 0 || size > (Py_ssize_t)sizeof(buf)) {
        PyErr_SetString(PyExc_ValueError, "recv_stamped: size must be in 1..262144");
        return -1;
    }
    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = (size_t)size};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.bytes;
    msg.msg_controllen = sizeof control.bytes;
    ssize_t got = recvmsg(fd, &msg, 0);
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    *read_ns = (long long)mono.tv_sec * 1000000000LL + mono.tv_nsec;
    PyObject *stamp_obj = Py_NewRef(Py_None);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
            c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(c), sizeof ts);
            Py_SETREF(stamp_obj, PyLong_FromLongLong((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec));
            if (stamp_obj == NULL) return -1;
        }
    }
    *data = PyBytes_FromStringAndSize(buf, got);
    if (*data == NULL) {
        Py_DECREF(stamp_obj);
        return -1;
    }
    *rt = stamp_obj;
    return 1;
}

static PyObject *hot_recv_stamped(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "recv_stamped(sock, fd, size)");
        return NULL;
    }
    long fd = PyLong_AsLong(args[1]); /* the caller's cached sock.fileno(); sock is the Python twin's */
    if (fd == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[2]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    PyObject *data, *rt;
    long long read_ns;
    int r = do_recv((int)fd, size, &data, &rt, &read_ns);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    return Py_BuildValue("(NNL)", data, rt, read_ns);
}

/* -- the two callables: each holds three objects, and the loop or the protocol calls it --------------------------- */
typedef struct {
    PyObject_HEAD
    PyObject *refs[3];
    vectorcallfunc vectorcall;
} Held;

static int held_traverse(Held *self, visitproc visit, void *arg) {
    for (int i = 0; i < 3; i++) Py_VISIT(self->refs[i]);
    return 0;
}

static int held_clear(Held *self) {
    for (int i = 0; i < 3; i++) Py_CLEAR(self->refs[i]);
    return 0;
}

static void held_dealloc(Held *self) {
    PyObject_GC_UnTrack(self);
    held_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Held *held_new(PyTypeObject *type, PyObject *a, PyObject *b, PyObject *c, vectorcallfunc call) {
    Held *self = (Held *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->refs[0] = Py_NewRef(a);
    self->refs[1] = Py_NewRef(b);
    self->refs[2] = Py_NewRef(c);
    self->vectorcall = call;
    return self;
}

#define HELD_TYPE(ctype, name, doc, newfn)                                                  \
    {                                                                                       \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = name, .tp_basicsize = sizeof(ctype),       \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,   \
        .tp_doc = doc, .tp_new = newfn, .tp_call = PyVectorcall_Call,                       \
        .tp_vectorcall_offset = offsetof(Held, vectorcall),                                 \
        .tp_traverse = (traverseproc)held_traverse, .tp_clear = (inquiry)held_clear,        \
        .tp_dealloc = (destructor)held_dealloc,                                             \
    }

/* Reader: KernelStampTransport._read_ready, whole, as the loop's reader callback (refs: transport, protocol, clock) */
typedef struct {
    Held h;
    int fd;
    Py_ssize_t size;
    int http1; /* the protocol is an Http1Connection: its fast path runs here; else protocol.data_received_at */
} Reader;

static PyObject *reader_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kw) {
    Reader *self = (Reader *)op;
    PyObject *transport = self->h.refs[0], *protocol = self->h.refs[1], *clock = self->h.refs[2];
    PyObject *data, *rt;
    long long read_ns;
    int r = do_recv(self->fd, self->size, &data, &rt, &read_ns);
    if (r == 0) Py_RETURN_NONE;
    if (r < 0) { /* a reset: asyncio's transport reports it the same way */
        if (!PyErr_ExceptionMatches(PyExc_OSError)) return NULL;
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        int rc = call_method(transport, s__force_close, &value, 1);
        Py_DECREF(value);
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = NULL, *sent = NULL, *arrival = NULL;
    if (PyBytes_GET_SIZE(data) == 0) { /* EOF: Http1Connection does not keep half-open connections */
        PyObject *none = Py_None;
        if (call_method(transport, s__force_close, &none, 1) == 0) out = Py_NewRef(Py_None);
        goto done;
    }
    sent = PyObject_GetAttr(protocol, s_sent_ns);
    if (sent == NULL) goto done;
    arrival = stamp(clock, rt, read_ns, sent);
    if (arrival == NULL) goto done;
    if (self->http1) {
        if (receive(protocol, data, arrival) < 0) goto done;
    } else {
        PyObject *cargs[2] = {data, arrival};
        if (call_method(protocol, s_data_received_at, cargs, 2) < 0) goto done;
    }
    out = Py_NewRef(Py_None);
done:
    Py_DECREF(data);
    Py_DECREF(rt);
    Py_XDECREF(sent);
    Py_XDECREF(arrival);
    return out;
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *transport, *protocol, *clock;
    int fd, http1;
    Py_ssize_t size;
    static char *kwlist[] = {"transport", "fd", "size", "protocol", "clock", "http1", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OinOOp", kwlist, &transport, &fd, &size, &protocol, &clock, &http1))
        return NULL;
    Reader *self = (Reader *)held_new(type, transport, protocol, clock, reader_call);
    if (self == NULL) return NULL;
    self->fd = fd;
    self->size = size;
    self->http1 = http1;
    return (PyObject *)self;
}

static PyTypeObject ReaderType = HELD_TYPE(
    Reader, "tailscope.client._hot.Reader",
    "Reader(transport, fd, size, protocol, clock, http1): KernelStampTransport._read_ready as one callable",
    reader_new);

/* Sink: execute()'s push-mode handler, on_data(stamp, chunk) -> event(chunk, stamp - t0, parser, st, count_tokens)
 * (refs: parser, st, count_tokens) */
typedef struct {
    Held h;
    long long t0;
} Sink;

static PyObject *sink_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kw) {
    Sink *self = (Sink *)op;
    if (PyVectorcall_NARGS(nargsf) != 2 || kw != NULL) {
        PyErr_SetString(PyExc_TypeError, "Sink(stamp, chunk)");
        return NULL;
    }
    long long stamp_ns = PyLong_AsLongLong(args[0]);
    if (stamp_ns == -1 && PyErr_Occurred()) return NULL;
    PyObject *now = PyLong_FromLongLong(stamp_ns - self->t0);
    if (now == NULL) return NULL;
    PyObject *eargs[5] = {args[1], now, self->h.refs[0], self->h.refs[1], self->h.refs[2]};
    PyObject *r = hot_event(NULL, eargs, 5);
    Py_DECREF(now);
    return r;
}

static PyObject *sink_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *parser, *st, *count_tokens;
    long long t0;
    static char *kwlist[] = {"parser", "st", "count_tokens", "t0", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOL", kwlist, &parser, &st, &count_tokens, &t0)) return NULL;
    Sink *self = (Sink *)held_new(type, parser, st, count_tokens, sink_call);
    if (self == NULL) return NULL;
    self->t0 = t0;
    return (PyObject *)self;
}

static PyTypeObject SinkType = HELD_TYPE(
    Sink, "tailscope.client._hot.Sink",
    "Sink(parser, st, count_tokens, t0): execute()'s push-mode handler as one callable", sink_new);

/* -- Poller: the kernel-stamped connections' own epoll set (kstamp.ReadBatcher; twin: kstamp._PollerPy) ----------- */
typedef struct {
    PyObject_HEAD
    int epfd;
    int cap;
    PyObject **readers; /* indexed by fd: the reader called when that socket is readable (strong references) */
} Poller;

/* up to this many ready sockets per poll(); the rest stay ready (level-triggered) for the next one */
#define POLL_MAX 1024

static int poller_traverse(Poller *self, visitproc visit, void *arg) {
    for (int i = 0; i < self->cap; i++) Py_VISIT(self->readers[i]);
    return 0;
}

static int poller_clear(Poller *self) {
    for (int i = 0; i < self->cap; i++) Py_CLEAR(self->readers[i]);
    return 0;
}

static void poller_dealloc(Poller *self) {
    PyObject_GC_UnTrack(self);
    poller_clear(self);
    PyMem_Free(self->readers);
    if (self->epfd >= 0) close(self->epfd);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *poller_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist)) return NULL;
    Poller *self = (Poller *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->readers = NULL;
    self->cap = 0;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int poller_open(Poller *self) {
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "Poller is closed");
        return 0;
    }
    return 1;
}

static PyObject *poller_fileno(Poller *self, PyObject *unused) {
    if (!poller_open(self)) return NULL;
    return PyLong_FromLong(self->epfd);
}

/* register(fd, reader): reader() is called by poll() whenever fd is readable (again: a new reader replaces the old) */
static PyObject *poller_register(Poller *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "register(fd, reader)");
        return NULL;
    }
    if (!poller_open(self)) return NULL;
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > 1 << 24) {
        PyErr_SetString(PyExc_ValueError, "register: fd out of range");
        return NULL;
    }
    if (!PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "register: reader must be callable");
        return NULL;
    }
    if (fd >= self->cap) {
        long cap = self->cap ? self->cap : 64;
        while (cap <= fd) cap *= 2;
        PyObject **grown = PyMem_Realloc(self->readers, (size_t)cap * sizeof(PyObject *));
        if (grown == NULL) return PyErr_NoMemory();
        memset(grown + self->cap, 0, (size_t)(cap - self->cap) * sizeof(PyObject *));
        self->readers = grown;
        self->cap = (int)cap;
    }
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = (int)fd;
    if (epoll_ctl(self->epfd, self->readers[fd] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, (int)fd, &ev) < 0) {
        if (errno != EEXIST || epoll_ctl(self->epfd, EPOLL_CTL_MOD, (int)fd, &ev) < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_XSETREF(self->readers[fd], Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* unregister(fd): True when fd was registered; a closed fd is fine (the kernel dropped it from the set already) */
static PyObject *poller_unregister(Poller *self, PyObject *arg) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd >= self->cap || self->readers[fd] == NULL) Py_RETURN_FALSE;
    if (self->epfd >= 0 && epoll_ctl(self->epfd, EPOLL_CTL_DEL, (int)fd, NULL) < 0 && errno != ENOENT && errno != EBADF)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_CLEAR(self->readers[fd]);
    Py_RETURN_TRUE;
}

/* poll(): call the reader of every socket readable now (no wait); the number called. A reader's exception stops the
 * poll and goes up; the sockets not yet read stay readable for the next poll. */
static PyObject *poller_poll(Poller *self, PyObject *unused) {
    if (!poller_open(self)) return NULL;
    struct epoll_event evs[POLL_MAX]; /* on the stack: a reader's Python code may poll another set */
    int n = epoll_wait(self->epfd, evs, POLL_MAX, 0);
    if (n < 0) {
        if (errno == EINTR) return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    long called = 0;
    for (int i = 0; i < n; i++) {
        int fd = evs[i].data.fd;
        if (fd < 0 || fd >= self->cap || self->readers[fd] == NULL) continue; /* unregistered by an earlier reader */
        PyObject *r = Py_NewRef(self->readers[fd]);
        PyObject *res = Py_IS_TYPE(r, &ReaderType) ? reader_call(r, NULL, 0, NULL) : PyObject_CallNoArgs(r);
        Py_DECREF(r);
        if (res == NULL) return NULL;
        Py_DECREF(res);
        called++;
    }
    return PyLong_FromLong(called);
}

/* close(): forget every reader and close the epoll descriptor (idempotent) */
static PyObject *poller_close(Poller *self, PyObject *unused) {
    poller_clear(self);
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
    Py_RETURN_NONE;
}

static PyMethodDef poller_methods[] = {
    {"fileno", (PyCFunction)poller_fileno, METH_NOARGS, "fileno(): the epoll descriptor (readable while a socket is)"},
    {"register", (PyCFunction)(void (*)(void))poller_register, METH_FASTCALL, "register(fd, reader)"},
    {"unregister", (PyCFunction)poller_unregister, METH_O, "unregister(fd) -> whether fd was registered"},
    {"poll", (PyCFunction)poller_poll, METH_NOARGS, "poll() -> how many ready sockets' readers were called"},
    {"close", (PyCFunction)poller_close, METH_NOARGS, "close(): forget the readers, close the epoll descriptor"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PollerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tailscope.client._hot.Poller",
    .tp_basicsize = sizeof(Poller),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Poller(): an epoll set of sockets, each with the reader poll() calls when it is readable",
    .tp_new = poller_new,
    .tp_traverse = (traverseproc)poller_traverse,
    .tp_clear = (inquiry)poller_clear,
    .tp_dealloc = (destructor)poller_dealloc,
    .tp_methods = poller_methods,
};

static PyObject *hot_monotonic_ns(PyObject *self, PyObject *unused) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return PyLong_FromLongLong((long long)t.tv_sec * 1000000000LL + t.tv_nsec);
}

static PyObject *hot_set_scan(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    g_scan = on;
    Py_RETURN_NONE;
}

/* scan(data): what the scanner keeps of one payload, as a dict (tests), or None where orjson decides */
static PyObject *hot_scan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const char *names[NF] = {"id", "completion_tokens", "prompt_tokens", "cached_tokens", "reasoning_tokens",
                                    "content", "reasoning_content", "reasoning", "text"};
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "scan(data)");
        return NULL;
    }
    Ev e;
    int r = scan_event(args[0], 1, &e);
    if (r < 0) return NULL;
    if (r == BAIL) Py_RETURN_NONE;
    PyObject *d = Py_BuildValue("{sisisi}", "choices", e.choices, "finish", e.finish, "delta", e.delta);
    for (int i = 0; d != NULL && i < NF; i++) {
        if (e.v[i] != NULL && PyDict_SetItemString(d, names[i], e.v[i]) < 0) Py_CLEAR(d);
    }
    ev_clear(&e);
    return d;
}

static PyObject *hot_configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "configure(loads, decode_error, malformed, server_error)");
        return NULL;
    }
    Py_XSETREF(g_loads, Py_NewRef(args[0]));
    Py_XSETREF(g_decode_error, Py_NewRef(args[1]));
    Py_XSETREF(g_malformed, Py_NewRef(args[2]));
    Py_XSETREF(g_server_error, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"push", (PyCFunction)(void (*)(void))hot_push, METH_FASTCALL, "push(data, now, handler) -> (consumed, done)"},
    {"consume", (PyCFunction)(void (*)(void))hot_consume, METH_FASTCALL, "consume(payloads, now, st, count_tokens)"},
    {"event", (PyCFunction)(void (*)(void))hot_event, METH_FASTCALL,
     "event(chunk, now, parser, st, count_tokens) -> st.done"},
    {"recv_stamped", (PyCFunction)(void (*)(void))hot_recv_stamped, METH_FASTCALL,
     "recv_stamped(sock, fd, size) -> (data, realtime_ns | None, read_ns) | None"},
    {"receive", (PyCFunction)(void (*)(void))hot_receive, METH_FASTCALL,
     "receive(conn, data, now): Http1Connection.data_received_at"},
    {"stamp", (PyCFunction)(void (*)(void))hot_stamp, METH_FASTCALL,
     "stamp(clock, realtime_ns, read_ns, floor_ns): RealtimeMap.stamp"},
    {"set_scan", hot_set_scan, METH_O, "set_scan(on): the event scanner before orjson (tests, comparisons)"},
    {"scan", (PyCFunction)(void (*)(void))hot_scan, METH_FASTCALL,
     "scan(data) -> the minimal object of one payload, or None where orjson decides"},
    {"monotonic_ns", hot_monotonic_ns, METH_NOARGS, "CLOCK_MONOTONIC in ns (time.perf_counter_ns's clock on Linux)"},
    {"configure", (PyCFunction)(void (*)(void))hot_configure, METH_FASTCALL,
     "configure(loads, decode_error, malformed, server_error)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hot", "tailscope's compiled client hot loop", -1, methods};

#define INTERN(var, text)                                      \
    do {                                                       \
        if ((var = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                       \
    } while (0)

PyMODINIT_FUNC PyInit__hot(void) {
    INTERN(s_get, "get");
    INTERN(s_append, "append");
    INTERN(s_feed_data, "feed_data");
    INTERN(s_buf, "_buf");
    INTERN(s_data, "_data");
    INTERN(s_first_event, "first_event");
    INTERN(s_done, "done");
    INTERN(s_request_id, "request_id");
    INTERN(s_input_tokens, "input_tokens");
    INTERN(s_completion_tokens, "completion_tokens");
    INTERN(s_cached_tokens, "cached_tokens");
    INTERN(s_reasoning_usage, "reasoning_usage");
    INTERN(s_finished, "finished");
    INTERN(s_first_answer, "first_answer");
    INTERN(s_chunk_times, "chunk_times");
    INTERN(s_texts, "texts");
    INTERN(s_usage_per_chunk, "usage_per_chunk");
    INTERN(s_last_usage_completion, "last_usage_completion");
    INTERN(s_chunk_tokens, "chunk_tokens");
    INTERN(s_reasoning, "reasoning");
    INTERN(s_handler, "handler");
    INTERN(s__chunked, "_chunked");
    INTERN(s__chunk_state, "_chunk_state");
    INTERN(s__line, "_line");
    INTERN(s_pieces, "pieces");
    INTERN(s__fail, "_fail");
    INTERN(s__wake, "_wake");
    INTERN(s_handler_done, "handler_done");
    INTERN(s__receive_general, "_receive_general");
    INTERN(s_user, "user");
    INTERN(s_kernel, "kernel");
    INTERN(s_clamped, "clamped");
    INTERN(s_next_sync_ns, "next_sync_ns");
    INTERN(s__offset, "_offset");
    INTERN(s_offset_ns, "offset_ns");
    INTERN(s_resync_ns, "resync_ns");
    INTERN(s__force_close, "_force_close");
    INTERN(s_sent_ns, "sent_ns");
    INTERN(s_data_received_at, "data_received_at");
    INTERN(k_choices, "choices");
    INTERN(k_usage, "usage");
    INTERN(k_id, "id");
    INTERN(k_completion_tokens, "completion_tokens");
    INTERN(k_prompt_tokens, "prompt_tokens");
    INTERN(k_prompt_tokens_details, "prompt_tokens_details");
    INTERN(k_cached_tokens, "cached_tokens");
    INTERN(k_completion_tokens_details, "completion_tokens_details");
    INTERN(k_reasoning_tokens, "reasoning_tokens");
    INTERN(k_error, "error");
    INTERN(k_message, "message");
    INTERN(k_finish_reason, "finish_reason");
    INTERN(k_delta, "delta");
    INTERN(k_content, "content");
    INTERN(k_reasoning_content, "reasoning_content");
    INTERN(k_reasoning, "reasoning");
    INTERN(k_text, "text");
    if ((g_one = PyLong_FromLong(1)) == NULL) return NULL;
    if ((g_done_marker = PyBytes_FromString("[DONE]")) == NULL) return NULL;
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&SinkType) < 0 || PyType_Ready(&PollerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObjectRef(m, "Sink", (PyObject *)&SinkType) < 0 ||
        PyModule_AddObjectRef(m, "Poller", (PyObject *)&PollerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ABI", HOT_ABI) < 0 || PyModule_AddStringConstant(m, "DIGEST", HOT_SOURCE_DIGEST) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
