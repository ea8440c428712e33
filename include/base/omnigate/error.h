/*
 * Domain errors: what went wrong in the words of API.md (a snake_case code, the field at fault
 * and a message), as validators and handlers record it. Responsible for recording an error; not
 * for answering it: an error carries no transport status, the HTTP layer maps its code to one
 * (og_api_status in api.h).
 */
#ifndef OMNIGATE_ERROR_H
#define OMNIGATE_ERROR_H

#include <stdbool.h>

typedef struct og_err {
    const char *code;  /* snake_case code of API.md §0-§3, a static string; NULL while no error */
    char field[128];   /* field at fault, "" when none */
    char message[256]; /* human-readable message, cut to fit */
} og_err_t;

/* Records an error with a printf-style message (`field` may be NULL). Returns false, so a
 * validator can `return og_err_fail(...)`. */
bool og_err_fail(og_err_t *e, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
