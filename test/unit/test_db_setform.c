/*
 * Unit tests of set forms (src/data/db/setform.c): which ops of a write unit are merged into
 * their first statement's set form, the PostgreSQL array literals built from their values, and
 * how the set form's rows are handed back to each op; and the unit's tally, its ops' rows summed
 * by key into array literals. No server: results are built by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "db_int.h"

/* A statement table like store.c's: ins (2 params) has its set form ins_many; upd (1 param)
 * has upd_many; plain has none. */
enum { S_INS, S_INS_MANY, S_UPD, S_UPD_MANY, S_PLAIN, S_COUNT };
static const og_db_stmt_t stmts[S_COUNT] = {
    [S_INS] = {.name = "ins", .sql = "INSERT", .nparams = 2, .many = S_INS_MANY + 1},
    [S_INS_MANY] = {.name = "ins_many", .sql = "INSERT many", .nparams = 2},
    [S_UPD] = {.name = "upd", .sql = "UPDATE", .nparams = 1, .many = S_UPD_MANY + 1},
    [S_UPD_MANY] = {.name = "upd_many", .sql = "UPDATE many", .nparams = 1},
    [S_PLAIN] = {.name = "plain", .sql = "SELECT", .nparams = 2},
};

/* An op whose first statement is `stmt` with values a and b (the second ignored for 1-param
 * statements), followed by `more` statements of S_PLAIN. */
static void op_init(og_db_op_t *op, int stmt, const char *a, const char *b, int more)
{
    memset(op, 0, sizeof(*op));
    op->write = true;
    op->nstmts = 1 + more;
    op->stmts[0].stmt = stmt;
    op->stmts[0].values[0] = a;
    op->stmts[0].values[1] = b;
    for (int i = 1; i <= more; i++)
        op->stmts[i].stmt = S_PLAIN;
}

/* A unit of the n ops, merged as the pool does before sending it (a pool of the table above, no
 * metrics). */
static unit_t *merged_unit(bool write, og_db_op_t *ops, int n)
{
    static const og_db_t db = {.stmts = stmts, .nstmts = S_COUNT};
    unit_t *u = db_unit_new(write);
    assert_non_null(u);
    for (int i = 0; i < n; i++)
        db_unit_add(u, &ops[i]);
    db_merge_groups(&db, u);
    return u;
}

/* Group g runs set form `stmt` for ops[idx[0]], ops[idx[1]], ... (n), in that order. */
static void assert_group(const group_t *g, int stmt, og_db_op_t *ops, const int *idx, int n)
{
    assert_int_equal(g->stmt, stmt);
    assert_int_equal(g->nops, n);
    for (int i = 0; i < n; i++)
        assert_ptr_equal(g->ops[i], &ops[idx[i]]);
}

/* Every value is quoted, with \ before " and \ only: braces, commas, spaces, an empty string and
 * multi-byte UTF-8 pass as they are, and a NULL value is the bare element NULL. */
static void test_array_literals_escape_each_value(void **state)
{
    (void)state;
    og_db_op_t ops[4];
    op_init(&ops[0], S_INS, "say \"hi\"", "C:\\dir\\", 0);
    op_init(&ops[1], S_INS, "{a,b} c", "", 0);
    op_init(&ops[2], S_INS, NULL, "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80", 0);
    op_init(&ops[3], S_INS, "\\\"", NULL, 0);
    unit_t *u = merged_unit(true, ops, 4);
    assert_int_equal(u->ngroups, 1);
    assert_group(&u->groups[0], S_INS_MANY, ops, (const int[]){0, 1, 2, 3}, 4);
    assert_string_equal(u->groups[0].values[0], "{\"say \\\"hi\\\"\",\"{a,b} c\",NULL,\"\\\\\\\"\"}");
    assert_string_equal(u->groups[0].values[1],
                        "{\"C:\\\\dir\\\\\",\"\",\"h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80\",NULL}");
    db_unit_free(u);
}

/* One op's values of a one-parameter set form: one element per op, in the unit's order. */
static void test_array_literal_of_one_parameter(void **state)
{
    (void)state;
    og_db_op_t ops[3];
    op_init(&ops[0], S_UPD, "1", NULL, 0);
    op_init(&ops[1], S_UPD, "22", NULL, 0);
    op_init(&ops[2], S_UPD, "333", NULL, 0);
    unit_t *u = merged_unit(true, ops, 3);
    assert_int_equal(u->ngroups, 1);
    assert_group(&u->groups[0], S_UPD_MANY, ops, (const int[]){0, 1, 2}, 3);
    assert_string_equal(u->groups[0].values[0], "{\"1\",\"22\",\"333\"}");
    assert_null(u->groups[0].values[1]);
    db_unit_free(u);
}

/* Ops are grouped by their first statement, a group per set form in order of first appearance,
 * each group's ops in the unit's order; an op whose first statement has no set form, or whose
 * set form only it would use, runs as it is; later statements never merge. */
static void test_groups_by_first_statement(void **state)
{
    (void)state;
    og_db_op_t ops[6];
    op_init(&ops[0], S_UPD, "u0", NULL, 0);
    op_init(&ops[1], S_INS, "i1", "x", 2);
    op_init(&ops[2], S_PLAIN, "p2", "x", 0);
    op_init(&ops[3], S_UPD, "u3", NULL, 1);
    op_init(&ops[4], S_INS, "i4", "y", 0);
    op_init(&ops[5], S_PLAIN, "p5", "z", 0);
    ops[5].stmts[1].stmt = S_INS; /* a set-form statement, but not its first */
    ops[5].nstmts = 2;
    unit_t *u = merged_unit(true, ops, 6);
    assert_int_equal(u->ngroups, 2);
    assert_group(&u->groups[0], S_UPD_MANY, ops, (const int[]){0, 3}, 2);
    assert_string_equal(u->groups[0].values[0], "{\"u0\",\"u3\"}");
    assert_group(&u->groups[1], S_INS_MANY, ops, (const int[]){1, 4}, 2);
    assert_string_equal(u->groups[1].values[0], "{\"i1\",\"i4\"}");
    assert_string_equal(u->groups[1].values[1], "{\"x\",\"y\"}");
    const bool merged[6] = {true, true, false, true, true, false};
    for (int i = 0; i < 6; i++)
        assert_int_equal(ops[i].merged, merged[i]);
    db_unit_free(u);
}

/* A read unit, a write unit of one op, and a unit where each set form has one op merge nothing;
 * merging also clears what a previous sending of a retried op left (merged, lost). */
static void test_no_group_without_two_ops(void **state)
{
    (void)state;
    og_db_op_t ops[2];
    op_init(&ops[0], S_INS, "a", "b", 0);
    op_init(&ops[1], S_INS, "c", "d", 0);
    ops[0].merged = ops[0].lost = true;
    unit_t *u = merged_unit(false, ops, 2);
    assert_int_equal(u->ngroups, 0);
    assert_false(ops[0].merged);
    assert_false(ops[0].lost);
    db_unit_free(u);

    u = merged_unit(true, ops, 1);
    assert_int_equal(u->ngroups, 0);
    db_unit_free(u);

    op_init(&ops[1], S_UPD, "c", NULL, 0);
    u = merged_unit(true, ops, 2);
    assert_int_equal(u->ngroups, 0);
    assert_false(ops[0].merged);
    assert_false(ops[1].merged);
    db_unit_free(u);
}

/* A set form's result as the server would send it: (ord int4, id int8, name text). */
static PGresult *set_form_result(const char *const rows[][3], int nrows)
{
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    assert_non_null(r);
    PGresAttDesc attrs[3] = {
        {.name = "ord", .typid = 23, .typlen = 4, .atttypmod = -1},
        {.name = "id", .typid = 20, .typlen = 8, .atttypmod = -1},
        {.name = "name", .typid = 25, .typlen = -1, .atttypmod = -1},
    };
    assert_true(PQsetResultAttrs(r, 3, attrs));
    for (int row = 0; row < nrows; row++)
        for (int f = 0; f < 3; f++)
            assert_true(
                PQsetvalue(r, row, f, (char *)rows[row][f], rows[row][f] ? (int)strlen(rows[row][f]) : -1));
    return r;
}

/* Each op gets the rows whose first column is its ordinal (from 1), in the result's order,
 * without that column; an op with none gets an empty result with the same columns; rows naming
 * no op of the group are dropped; a result the op held before is replaced. */
static void test_split_result_by_ordinal(void **state)
{
    (void)state;
    static const char *const rows[][3] = {
        {"2", "10", "b"}, {"1", "11", NULL}, {"4", "15", "last"},
        {"2", "12", "c"}, {"0", "13", "x"},  {"5", "14", "y"},
    };
    og_db_op_t ops[4];
    og_db_op_t *gops[4] = {&ops[0], &ops[1], &ops[2], &ops[3]};
    for (int i = 0; i < 4; i++)
        op_init(&ops[i], S_INS, "v", "w", 0);
    ops[2].res[0] = PQmakeEmptyPGresult(NULL, PGRES_COMMAND_OK); /* a stale one */
    group_t g = {.stmt = S_INS_MANY, .nops = 4, .ops = gops};
    PGresult *r = set_form_result(rows, 6);
    assert_true(db_split_result(NULL, &g, r));
    PQclear(r);

    for (int i = 0; i < 4; i++) {
        const PGresult *own = ops[i].res[0];
        assert_non_null(own);
        assert_int_equal(PQresultStatus(own), PGRES_TUPLES_OK);
        assert_int_equal(PQnfields(own), 2);
        assert_string_equal(PQfname(own, 0), "id");
        assert_string_equal(PQfname(own, 1), "name");
        assert_int_equal(PQftype(own, 0), 20);
        assert_int_equal(PQftype(own, 1), 25);
    }
    assert_int_equal(PQntuples(ops[0].res[0]), 1);
    assert_string_equal(PQgetvalue(ops[0].res[0], 0, 0), "11");
    assert_true(PQgetisnull(ops[0].res[0], 0, 1));
    assert_int_equal(PQntuples(ops[1].res[0]), 2);
    assert_string_equal(PQgetvalue(ops[1].res[0], 0, 0), "10");
    assert_string_equal(PQgetvalue(ops[1].res[0], 0, 1), "b");
    assert_false(PQgetisnull(ops[1].res[0], 0, 1));
    assert_string_equal(PQgetvalue(ops[1].res[0], 1, 0), "12");
    assert_string_equal(PQgetvalue(ops[1].res[0], 1, 1), "c");
    assert_int_equal(PQntuples(ops[2].res[0]), 0);
    assert_int_equal(PQntuples(ops[3].res[0]), 1);
    assert_string_equal(PQgetvalue(ops[3].res[0], 0, 0), "15");
    assert_string_equal(PQgetvalue(ops[3].res[0], 0, 1), "last");
    for (int i = 0; i < 4; i++)
        og_db_op_clear(&ops[i]);
}

/* A set form that returns no column (a plain INSERT): nothing is handed out, each op's first
 * result stays NULL. */
static void test_split_result_without_columns(void **state)
{
    (void)state;
    og_db_op_t ops[2];
    og_db_op_t *gops[2] = {&ops[0], &ops[1]};
    for (int i = 0; i < 2; i++)
        op_init(&ops[i], S_INS, "v", "w", 0);
    group_t g = {.stmt = S_INS_MANY, .nops = 2, .ops = gops};
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    assert_true(db_split_result(NULL, &g, r));
    PQclear(r);
    assert_null(ops[0].res[0]);
    assert_null(ops[1].res[0]);
}

/* The tally: the merged ops' rows summed by their keys (compared as strings, NULL apart), one
 * element per distinct key in order of first appearance, keys quoted as set forms quote values,
 * sums as integers (negative ones too); ops without rows add nothing, nor does an op that runs
 * alone (its single form counts for itself). */
static void test_tally_sums_rows_by_key(void **state)
{
    (void)state;
    char day[] = "2026-11-28"; /* another buffer with the same text is the same key */
    const og_db_tally_row_t a[] = {
        {.keys = {"t1", "2026-11-28", "sms"}, .sums = {1, 1, 0, 5000, 1, 0}},
        {.keys = {"t1", "2026-11-28", "whatsapp_meta"}, .sums = {1, 0, 1, 0, 0, 0}},
    };
    const og_db_tally_row_t b[] = {{.keys = {"t1", day, "sms"}, .sums = {1, 1, 0, 7000, 0, -250}}};
    const og_db_tally_row_t c[] = {
        {.keys = {"t\"2", "2026-11-27", NULL}, .sums = {2, 0, 0, 0, 0, INT64_MIN}},
        {.keys = {"t1", "2026-11-28", "sms"}, .sums = {1, 0, 1, 0, 0, 0}},
    };
    const og_db_tally_row_t alone[] = {{.keys = {"t1", "2026-11-28", "sms"}, .sums = {100, 0, 0, 0, 0, 0}}};
    og_db_op_t ops[5];
    for (int i = 0; i < 4; i++)
        op_init(&ops[i], S_INS, "i", "v", 0);
    op_init(&ops[4], S_PLAIN, "p", "q", 0);
    ops[4].tally = alone;
    ops[4].ntally = 1;
    ops[0].tally = a;
    ops[0].ntally = 2;
    ops[2].tally = b;
    ops[2].ntally = 1;
    ops[3].tally = c;
    ops[3].ntally = 2;
    unit_t *u = merged_unit(true, ops, 5);
    assert_int_equal(u->ngroups, 1);
    assert_true(db_tally_values(u));
    assert_non_null(u->tally_buf);
    const char *want[OG_DB_TALLY_KEYS + OG_DB_TALLY_SUMS] = {
        "{\"t1\",\"t1\",\"t\\\"2\"}",
        "{\"2026-11-28\",\"2026-11-28\",\"2026-11-27\"}",
        "{\"sms\",\"whatsapp_meta\",NULL}",
        "{3,1,2}",
        "{2,0,0}",
        "{1,1,0}",
        "{12000,0,0}",
        "{1,0,0}",
        "{-250,0,-9223372036854775808}",
    };
    for (int k = 0; k < OG_DB_TALLY_KEYS + OG_DB_TALLY_SUMS; k++)
        assert_string_equal(u->tally_values[k], want[k]);
    db_unit_free(u);

    /* An op alone (its single form): nothing to send. */
    unit_t *none = merged_unit(true, ops, 1);
    assert_true(db_tally_values(none));
    assert_null(none->tally_buf);
    db_unit_free(none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_literals_escape_each_value),
        cmocka_unit_test(test_array_literal_of_one_parameter),
        cmocka_unit_test(test_groups_by_first_statement),
        cmocka_unit_test(test_no_group_without_two_ops),
        cmocka_unit_test(test_split_result_by_ordinal),
        cmocka_unit_test(test_split_result_without_columns),
        cmocka_unit_test(test_tally_sums_rows_by_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
