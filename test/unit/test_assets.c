/*
 * Unit tests of the embedded-file lookup (src/net/assets.c). The answer itself (ETag, 304,
 * security headers) is tested end to end on the real binary (test/e2e/test_console.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/assets.h"

static const unsigned char page[] = "<p>hi</p>";
static const og_asset_t table[] = {
    {"/console", "text/html; charset=utf-8", "\"a\"", page, sizeof(page) - 1},
    {"/console/app.js", "text/javascript; charset=utf-8", "\"b\"", page, sizeof(page) - 1},
    {NULL, NULL, NULL, NULL, 0},
};

/* Only the exact path matches: no prefix, no longer path, no case folding. */
static void test_find_exact_path(void **state)
{
    assert_ptr_equal(og_asset_find(table, "/console", 8), &table[0]);
    assert_ptr_equal(og_asset_find(table, "/console/app.js", 15), &table[1]);
    assert_null(og_asset_find(table, "/console/", 9));
    assert_null(og_asset_find(table, "/consol", 7));
    assert_null(og_asset_find(table, "/Console", 8));
    assert_null(og_asset_find(table, "", 0));
}

/* An empty table (a build with no files listed) finds nothing. */
static void test_find_in_empty_table(void **state)
{
    static const og_asset_t empty[] = {{NULL, NULL, NULL, NULL, 0}};
    assert_null(og_asset_find(empty, "/console", 8));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_exact_path),
        cmocka_unit_test(test_find_in_empty_table),
    };
    return cmocka_run_group_tests_name("assets", tests, NULL, NULL);
}
