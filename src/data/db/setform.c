/*
 * Set forms (og_db_stmt_t.many): merging a write batch's ops that start with one statement into a
 * call of its set form (PostgreSQL array literals of their values), and splitting its rows into
 * each op's result; and the batch's tally (og_db_set_tally), its ops' rows summed by key into
 * array literals the same way. Not sending the calls or routing their results (pipeline.c).
 */
#include "db_int.h"

#include "omnigate/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hands each op of group g the rows of the set form's result r that are its own: those whose
 * first column (the op's ordinal, from 1) names it, without that column. Every op gets a
 * result, with no rows when none is its own. False when out of memory. pg: the connection the
 * results are made for (may be NULL). */
bool db_split_result(PGconn *pg, const group_t *g, const PGresult *r)
{
    int nf = PQnfields(r);
    if (nf < 1)
        return true;
    PGresAttDesc *attrs = malloc((size_t)nf * sizeof(*attrs)); /* nf - 1 used; never malloc(0) */
    if (attrs == NULL)
        return false;
    for (int f = 1; f < nf; f++)
        attrs[f - 1] = (PGresAttDesc){.name = PQfname(r, f),
                                      .tableid = PQftable(r, f),
                                      .columnid = PQftablecol(r, f),
                                      .format = PQfformat(r, f),
                                      .typid = PQftype(r, f),
                                      .typlen = PQfsize(r, f),
                                      .atttypmod = PQfmod(r, f)};
    bool ok = true;
    for (int i = 0; ok && i < g->nops; i++) {
        PGresult *own = PQmakeEmptyPGresult(pg, PGRES_TUPLES_OK);
        ok = own != NULL && PQsetResultAttrs(own, nf - 1, attrs);
        if (ok) {
            PQclear(g->ops[i]->res[0]);
            g->ops[i]->res[0] = own;
        } else {
            PQclear(own);
        }
    }
    free(attrs); /* PQsetResultAttrs copied them */
    if (!ok)
        return false;
    for (int row = 0; row < PQntuples(r); row++) {
        long ord = strtol(PQgetvalue(r, row, 0), NULL, 10);
        if (ord < 1 || ord > g->nops)
            continue;
        PGresult *own = g->ops[ord - 1]->res[0];
        int at = PQntuples(own);
        for (int f = 1; f < nf; f++) {
            bool null = PQgetisnull(r, row, f);
            if (!PQsetvalue(own, at, f - 1, null ? NULL : PQgetvalue(r, row, f),
                            null ? -1 : PQgetlength(r, row, f)))
                return false;
        }
    }
    return true;
}

/* Appends `v` to `p` as an element of an array literal: NULL, or quoted with \ before every "
 * and \. */
static char *array_element(char *p, const char *v)
{
    if (v == NULL) {
        memcpy(p, "NULL", 4);
        return p + 4;
    }
    *p++ = '"';
    for (; *v; v++) {
        if (*v == '"' || *v == '\\')
            *p++ = '\\';
        *p++ = *v;
    }
    *p++ = '"';
    return p;
}

/* Builds group g's array literals: parameter k is {ops[0]'s k-th value, ops[1]'s, ...}. */
static bool group_values(const og_db_t *db, group_t *g)
{
    int np = db->stmts[g->stmt].nparams;
    size_t size = 0;
    for (int i = 0; i < g->nops; i++)
        for (int k = 0; k < np; k++) {
            const char *v = g->ops[i]->stmts[0].values[k];
            size += v != NULL ? 2 * strlen(v) + 3 : 5; /* escaped and quoted, and a comma */
        }
    size += (size_t)np * 3;
    char *p = g->buf = malloc(size);
    if (p == NULL)
        return false;
    for (int k = 0; k < np; k++) {
        g->values[k] = p;
        *p++ = '{';
        for (int i = 0; i < g->nops; i++) {
            if (i > 0)
                *p++ = ',';
            p = array_element(p, g->ops[i]->stmts[0].values[k]);
        }
        *p++ = '}';
        *p++ = '\0';
    }
    return true;
}

/* Whether op, not in a group yet, starts with statement stmt, which has a set form. */
static bool mergeable(const og_db_t *db, const og_db_op_t *op, int stmt)
{
    return !op->merged && op->nstmts >= 1 && op->stmts[0].stmt == stmt && db->stmts[stmt].many != 0;
}

/* In a write unit of several ops, gathers the ops whose first statement has a set form, by that
 * statement, into one group each (two ops or more): the group's one statement does their first
 * statements' work, before the rest of every op's statements. The ops of a batch are
 * independent of each other (any may be retried alone), so only each op's own order matters,
 * and it is kept. Without memory, the ops simply run as they are. */
void db_merge_groups(const og_db_t *db, unit_t *u)
{
    for (og_db_op_t *op = u->head; op; op = op->next)
        op->merged = op->lost = false; /* a retried op is sent again: nothing of it committed */
    if (!u->write || u->nops < 2)
        return;
    for (og_db_op_t *op = u->head; op; op = op->next) {
        if (op->nstmts < 1 || !mergeable(db, op, op->stmts[0].stmt))
            continue;
        int stmt = op->stmts[0].stmt, n = 0;
        for (og_db_op_t *o = op; o; o = o->next)
            n += mergeable(db, o, stmt);
        if (n < 2)
            continue;
        group_t *gs = realloc(u->groups, (size_t)(u->ngroups + 1) * sizeof(*gs));
        if (gs == NULL)
            return;
        u->groups = gs;
        group_t *g = memset(&gs[u->ngroups], 0, sizeof(*g));
        g->stmt = db->stmts[stmt].many - 1;
        if ((g->ops = malloc((size_t)n * sizeof(*g->ops))) == NULL)
            return;
        for (og_db_op_t *o = op; o; o = o->next)
            if (mergeable(db, o, stmt))
                g->ops[g->nops++] = o;
        if (!group_values(db, g)) {
            free(g->ops);
            return;
        }
        for (int i = 0; i < g->nops; i++)
            g->ops[i]->merged = true;
        u->ngroups++;
        if (db->metrics != NULL)
            og_metrics_add(&db->metrics->db_merged, (uint64_t)g->nops);
    }
}

/* ---- the tally ---------------------------------------------------------------------------- */

static bool same_keys(const og_db_tally_row_t *a, const og_db_tally_row_t *b)
{
    for (int k = 0; k < OG_DB_TALLY_KEYS; k++) {
        if ((a->keys[k] == NULL) != (b->keys[k] == NULL))
            return false;
        if (a->keys[k] != NULL && strcmp(a->keys[k], b->keys[k]) != 0)
            return false;
    }
    return true;
}

/* Only merged ops add rows: an op alone runs its single form, which counts for itself. */
bool db_tally_values(unit_t *u)
{
    size_t rows = 0;
    for (const og_db_op_t *op = u->head; op; op = op->next)
        rows += op->merged && op->ntally > 0 ? (size_t)op->ntally : 0;
    if (rows == 0)
        return true;
    /* The distinct keys in order of first appearance, each with its sums: a batch holds at most
     * OG_DB_MAX_BATCH ops of a few rows, so a linear search is cheaper than sorting. */
    og_db_tally_row_t *d = malloc(rows * sizeof(*d));
    if (d == NULL)
        return false;
    size_t nd = 0, size = (OG_DB_TALLY_KEYS + OG_DB_TALLY_SUMS) * 3;
    for (const og_db_op_t *op = u->head; op; op = op->next)
        for (int i = 0; op->merged && i < op->ntally; i++) {
            const og_db_tally_row_t *r = &op->tally[i];
            size_t j = 0;
            while (j < nd && !same_keys(&d[j], r))
                j++;
            if (j == nd) {
                d[nd] = (og_db_tally_row_t){0};
                memcpy(d[nd].keys, r->keys, sizeof(r->keys));
                for (int k = 0; k < OG_DB_TALLY_KEYS; k++)
                    size += r->keys[k] != NULL ? 2 * strlen(r->keys[k]) + 3 : 5;
                size += OG_DB_TALLY_SUMS * 21; /* INT64_MIN and a comma */
                nd++;
            }
            for (int k = 0; k < OG_DB_TALLY_SUMS; k++)
                d[j].sums[k] += r->sums[k];
        }
    char *p = u->tally_buf = malloc(size);
    if (p == NULL) {
        free(d);
        return false;
    }
    for (int k = 0; k < OG_DB_TALLY_KEYS + OG_DB_TALLY_SUMS; k++) {
        u->tally_values[k] = p;
        *p++ = '{';
        for (size_t j = 0; j < nd; j++) {
            if (j > 0)
                *p++ = ',';
            if (k < OG_DB_TALLY_KEYS)
                p = array_element(p, d[j].keys[k]);
            else
                p += sprintf(p, "%" PRId64, d[j].sums[k - OG_DB_TALLY_KEYS]);
        }
        *p++ = '}';
        *p++ = '\0';
    }
    free(d);
    return true;
}
