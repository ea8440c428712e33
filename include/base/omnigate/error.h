/*
 * Domain errors: what went wrong in the words of API.md (a code, the field at fault and a
 * message), as validators and handlers record it. Responsible for recording an error; not for
 * answering it, nor for the codes themselves: a code is a constant object whose type the HTTP
 * layer defines (struct og_errcode in api.h: name and status) and whose instances each layer
 * declares for the errors it answers (net's in api.h, the product's in app/errors.h).
 */
#ifndef OMNIGATE_ERROR_H
#define OMNIGATE_ERROR_H

#include <stdbool.h>

/* Incomplete here: base records which code, and never looks inside one. */
typedef struct og_errcode og_errcode_t;

typedef struct og_err {
    const og_errcode_t *code; /* a code of API.md §0-§3 (a constant object); NULL while no error */
    char field[128];          /* field at fault, "" when none */
    char message[256];        /* human-readable message, cut to fit */
} og_err_t;

/* Records an error with a printf-style message (`field` may be NULL). Returns false, so a
 * validator can `return og_err_fail(...)`. */
bool og_err_fail(og_err_t *e, const og_errcode_t *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
