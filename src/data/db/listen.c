/*
 * The listener (og_db_listen): one more connection outside the pool, whose first unit is LISTEN,
 * and the notifications it hands to the caller. Not how it connects, backs off or breaks: it does
 * so through the pool connections' functions (conn.c).
 *
 * Once ready the listener never carries a unit again; readable input there means notifications
 * (or the end of the connection).
 */
#include "db_int.h"

#include <stdio.h>
#include <string.h>

static bool channel_valid(const char *channel)
{
    size_t n = strlen(channel);
    if (n == 0 || n > CHANNEL_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        if ((channel[i] < 'a' || channel[i] > 'z') && channel[i] != '_')
            return false;
    }
    return true;
}

bool og_db_set_listener(og_db_t *db, bool enabled, const char *conninfo)
{
    if (db->listener.listen || db->listen_own_plan)
        return false;
    db->listen_off = !enabled;
    if (!enabled || conninfo == NULL)
        return true;
    if (!db_plan_init(&db->listen_plan, conninfo, db->timeout_ms)) {
        db_plan_free(&db->listen_plan);
        db->listen_plan = (plan_t){0};
        return false;
    }
    db->listen_own_plan = true;
    return true;
}

bool og_db_listen(og_db_t *db, const char *channel, og_db_notify_fn fn, void *arg)
{
    if (db->closing || db->reader || db->listen_off || db->listener.listen || fn == NULL ||
        !channel_valid(channel))
        return false;
    snprintf(db->channel, sizeof(db->channel), "%s", channel);
    db->notify = fn;
    db->notify_arg = arg;
    db->listener.listen = true;
    db_conn_init(db, &db->listener, -1);
    return true;
}

bool db_listen_send(dbconn_t *c)
{
    /* LISTEN takes no parameter: the channel is an identifier og_db_listen checked ([a-z_]+). */
    char sql[80];
    snprintf(sql, sizeof(sql), "LISTEN %s", c->db->channel);
    return PQsendQueryParams(c->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
}

void db_listen_up(dbconn_t *c)
{
    /* Notifications sent while it was down are lost: the caller looks for work. */
    c->db->notify(c->db->notify_arg, c->db->channel, NULL);
}

/* The caller may close the pool from the callback (db_conn_broken then finishes the connection,
 * and the loop stops). */
void db_listen_deliver(dbconn_t *c)
{
    og_db_t *db = c->db;
    PGnotify *n;
    while (c->state == C_READY && (n = PQnotifies(c->pg)) != NULL) {
        db->notify(db->notify_arg, n->relname, n->extra);
        PQfreemem(n);
    }
}
