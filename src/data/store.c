/*
 * The prepared statements of the request path. See include/data/omnigate/store.h. Their
 * table, og_store_stmts, and their binders are generated from the files of sql/queries/ by
 * src/tools/embed_queries.py, so the SQL is read and reviewed as SQL; what is left here is the
 * check of ids bound for them.
 */
#include "omnigate/store.h"

#include <ctype.h>
#include <string.h>

bool og_store_uuid_valid(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return false;
        } else if (!isxdigit((unsigned char)s[i])) {
            return false;
        }
    }
    return true;
}
