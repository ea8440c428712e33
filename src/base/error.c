/*
 * Domain errors. See include/base/omnigate/error.h.
 */
#include "omnigate/error.h"

#include <stdarg.h>
#include <stdio.h>

bool og_err_fail(og_err_t *e, const og_errcode_t *code, const char *field, const char *fmt, ...)
{
    e->code = code;
    snprintf(e->field, sizeof(e->field), "%s", field != NULL ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return false;
}
