/*
 * Fuzzes the append-only JSON writer (src/base/jw.c). An input is a program: each byte picks
 * the next step (a string of the following bytes, an integer, true/false, null, open an array or
 * an object, close one), and every value inside an object gets a key cut from the input first.
 * The writer and a jansson tree are built side by side, inside one top-level array.
 *
 * Checked: the writer's text always parses (json_loadb); `replaced` is set exactly when a string
 * was not well-formed UTF-8; and when every string was, the text is byte for byte what
 * json_dumps(JSON_COMPACT | JSON_PRESERVE_ORDER) gives for the tree.
 */
#include <string.h>

#include "fuzz.h"
#include "omnigate/jw.h"

#define MAX_DEPTH 16

typedef struct prog {
    const uint8_t *p;
    size_t left;
} prog_t;

static unsigned next(prog_t *g)
{
    if (g->left == 0)
        return 0;
    g->left--;
    return *g->p++;
}

static const char *take(prog_t *g, size_t want, size_t *n)
{
    *n = want < g->left ? want : g->left;
    const char *s = (const char *)g->p;
    g->p += *n;
    g->left -= *n;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    prog_t g = {data, size};
    og_jw_t w;
    og_jw_init(&w, 1);
    json_t *stack[MAX_DEPTH + 1];
    int depth = 0;
    stack[0] = json_array();
    og_jw_array(&w);
    bool all_utf8 = true;
    unsigned keys = 0;
    while (g.left > 0) {
        unsigned op = next(&g) % 7;
        json_t *top = stack[depth];
        if (op == 6) {
            if (depth == 0)
                continue;
            json_is_object(top) ? og_jw_object_end(&w) : og_jw_array_end(&w);
            depth--;
            continue;
        }
        if ((op == 4 || op == 5) && depth == MAX_DEPTH)
            continue;
        char key[64];
        if (json_is_object(top)) {
            /* Distinct keys (jansson would merge repeats), with bytes of the input to escape. */
            size_t kn;
            const char *k = take(&g, next(&g) % 8, &kn);
            if (memchr(k, '\0', kn) != NULL || !fuzz_utf8_valid(k, kn))
                kn = 0;
            memcpy(key, k, kn);
            snprintf(key + kn, sizeof(key) - kn, "\x01%u", keys++);
            og_jw_key(&w, key);
        }
        json_t *v = NULL;
        switch (op) {
        case 0: {
            size_t n;
            const char *s = take(&g, next(&g) % 48, &n);
            og_jw_stringn(&w, s, n);
            v = json_stringn(s, n); /* NULL when not UTF-8 */
            if (v == NULL) {
                all_utf8 = false;
                v = json_string("");
            }
            break;
        }
        case 1: {
            long long x = 0;
            for (int i = 0; i < 8; i++)
                x = (long long)((unsigned long long)x << 8 | next(&g));
            og_jw_int(&w, x);
            v = json_integer(x);
            break;
        }
        case 2: {
            bool b = next(&g) & 1;
            og_jw_bool(&w, b);
            v = json_boolean(b);
            break;
        }
        case 3:
            og_jw_null(&w);
            v = json_null();
            break;
        case 4:
            og_jw_array(&w);
            v = json_array();
            break;
        case 5:
            og_jw_object(&w);
            v = json_object();
            break;
        }
        FUZZ_CHECK(v != NULL);
        if (json_is_object(top))
            FUZZ_CHECK(json_object_set(top, key, v) == 0);
        else
            FUZZ_CHECK(json_array_append(top, v) == 0);
        if (op == 4 || op == 5)
            stack[++depth] = v;
        json_decref(v);
    }
    for (; depth > 0; depth--) /* json_is_object is a macro: no side effects in its argument */
        json_is_object(stack[depth]) ? og_jw_object_end(&w) : og_jw_array_end(&w);
    og_jw_array_end(&w);
    FUZZ_CHECK(w.replaced == !all_utf8);
    size_t len;
    char *ours = og_jw_finish(&w, &len);
    FUZZ_CHECK(ours != NULL && strlen(ours) == len);
    json_error_t err;
    json_t *back = json_loadb(ours, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (back == NULL)
        fprintf(stderr, "does not parse: %s: %s\n", err.text, ours);
    FUZZ_CHECK(back != NULL);
    json_decref(back);
    if (all_utf8) {
        char *theirs = json_dumps(stack[0], JSON_COMPACT | JSON_PRESERVE_ORDER);
        FUZZ_CHECK(theirs != NULL);
        if (strcmp(ours, theirs) != 0)
            fprintf(stderr, "ours:   %s\ntheirs: %s\n", ours, theirs);
        FUZZ_CHECK(strcmp(ours, theirs) == 0);
        free(theirs);
    }
    free(ours);
    json_decref(stack[0]);
    return 0;
}
