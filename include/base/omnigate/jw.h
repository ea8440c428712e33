/*
 * An append-only JSON writer for the hot path: the send answer, the provider request bodies,
 * the attempts of a completion write. Writes compact JSON straight into one growing buffer, the
 * same text jansson's json_dumps(JSON_COMPACT | JSON_PRESERVE_ORDER) gives for the same values
 * (escaping included), without building a tree. Responsible for syntax (commas, quotes,
 * escapes) and valid UTF-8 out; not for the shape of the document (the caller opens and
 * closes what it writes) or for parsing (jansson, json.h).
 */
#ifndef OMNIGATE_JW_H
#define OMNIGATE_JW_H

#include <stdbool.h>
#include <stddef.h>

typedef struct og_jw {
    char *buf; /* malloc'd, NUL-terminated after each call; NULL until the first write */
    size_t len, cap;
    bool failed;   /* out of memory: later calls do nothing and og_jw_finish gives NULL */
    bool comma;    /* something was written at this level: the next key or element needs a ',' */
    bool replaced; /* a string had bytes that are not UTF-8 (written as U+FFFD) */
} og_jw_t;

/* An empty writer whose buffer will start at `hint` bytes (0: a default). */
void og_jw_init(og_jw_t *w, size_t hint);

void og_jw_object(og_jw_t *w);     /* { */
void og_jw_object_end(og_jw_t *w); /* } */
void og_jw_array(og_jw_t *w);      /* [ */
void og_jw_array_end(og_jw_t *w);  /* ] */

/* An object's key (escaped as a string); the value follows with the next call. */
void og_jw_key(og_jw_t *w, const char *key);

/* A string value: s[0..n) escaped as jansson escapes it ('"', '\\', control characters; '/' and
 * non-ASCII as they are). Bytes that are not well-formed UTF-8 (which jansson would refuse) are
 * each written as U+FFFD, so the output is always valid JSON. og_jw_string(w, NULL) writes null. */
void og_jw_stringn(og_jw_t *w, const char *s, size_t n);
void og_jw_string(og_jw_t *w, const char *s);
void og_jw_int(og_jw_t *w, long long v);
/* `v` in decimal into `out` (NUL-terminated), as "%lld" writes it, without printf (og_jw_int's
 * digits, for a parameter or a header); its length. */
#define OG_INT_STR_SIZE 21
size_t og_int_str(char out[OG_INT_STR_SIZE], long long v);
/* A number with at most 6 significant digits, as printf's "%.6g" writes it ("80", "0.25",
 * "1e+06"); a whole number under a million is written without printf (its cost, thousands of
 * instructions, was paid per queued message for each sender's rate). */
void og_jw_number6(og_jw_t *w, double v);
void og_jw_bool(og_jw_t *w, bool v);
void og_jw_null(og_jw_t *w);
/* A value that is already JSON text, copied as is (the caller vouches for it). */
void og_jw_raw(og_jw_t *w, const char *json, size_t n);

/* key + value in one call. */
void og_jw_kstring(og_jw_t *w, const char *key, const char *s);
void og_jw_kint(og_jw_t *w, const char *key, long long v);

/* Hands over the text (malloc'd, NUL-terminated; free with free()) and its length in `*len`
 * (when not NULL), leaving `w` empty; NULL when a write ran out of memory. */
char *og_jw_finish(og_jw_t *w, size_t *len);

/* og_jw_finish for a text that is kept a while (a provider request's body, held through the
 * provider's wait): its allocation is cut to the text's size. Strings reserve room for their
 * worst-case escaping as they are written, so a buffer ends up to six times the size of the
 * text it holds. */
char *og_jw_finish_fit(og_jw_t *w, size_t *len);

/* Frees what `w` holds (after a failure, or instead of og_jw_finish). */
void og_jw_free(og_jw_t *w);

#endif
