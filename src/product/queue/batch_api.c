/*
 * Batches (API.md §20). See include/product/omnigate/queue/batch_api.h; the SQL is
 * sql/queries/batches.sql and sql/020_batches.sql.
 *
 * POST /api/omni/batches: the body is read whole (OG_BATCH_MAX_BODY), its size checked before
 * anything else, then each message is the defaults with its own fields over them, its
 * variables filled in, checked as a send (send_item.h). The templates the messages name are
 * looked up one after another (the catalogue's cache answers all but the first of each); the
 * accepted messages, the batch and the idempotent answer are committed in one transaction, and
 * only then is the 202 sent.
 */
#include "omnigate/queue/batch_api.h"

#include <stdlib.h>
#include <string.h>

#include "omnigate/api.h"
#include "omnigate/app/answer.h"
#include "omnigate/app/ctx.h"
#include "omnigate/app/errors.h"
#include "omnigate/consent/consent.h"
#include "omnigate/ids.h"
#include "omnigate/json.h"
#include "omnigate/jw.h"
#include "omnigate/messaging/budget.h"
#include "omnigate/messaging/idem.h"
#include "omnigate/messaging/send_item.h"
#include "omnigate/queue/release.h"
#include "omnigate/store.h"
#include "omnigate/templates/catalogue.h"
#include "omnigate/templates/render.h"
#include "omnigate/tenants/auth.h"
#include "omnigate/util.h"

typedef enum { ROUTE_CREATE, ROUTE_GET, ROUTE_CANCEL } route_t;

/* One message of the request: checked (item), or rejected (err). */
typedef struct batch_msg {
    og_send_item_t *item;
    og_err_t err;
} batch_msg_t;

typedef struct batch_req {
    og_auth_req_t auth; /* first: the auth callback finds us from it */
    og_gw_t *gw;
    og_http_req_t *req;
    og_consent_wait_t consent_wait; /* POST */
    og_db_op_t *op;
    route_t route;
    char id[OG_IDS_REFERENCE_SIZE]; /* the batch */
    char tenant_id[37];             /* GET: the tenant's (the token's, or the admin route's {id}) */

    /* POST: the messages in request order, the next one whose template is to be looked up,
     * and whether the lookup in flight answered before og_tpl_lookup returned. */
    batch_msg_t *msgs;
    size_t n, next;
    bool looking;    /* a lookup is in flight: tpl_found answered it only if it clears this first */
    bool on_primary; /* GET: read again on the write pool's server (read_done) */
    og_idem_t idem;
    size_t accepted, scheduled;
    int64_t first_due_ms, last_due_ms;
    char queued_s[12], scheduled_s[12], last_due_s[24];
    char *rows_text;
    char *response_text;
    size_t response_len;
    int response_status;
    char response_status_s[4];
} batch_req_t;

static void req_free(batch_req_t *b)
{
    og_db_op_free(b->op);
    for (size_t i = 0; i < b->n; i++)
        og_send_item_free(b->msgs[i].item);
    free(b->msgs);
    og_idem_clear(&b->idem);
    free(b->rows_text);
    free(b->response_text);
    og_tenant_release(b->auth.tenant);
    free(b);
}

static bool rejected(const batch_msg_t *m)
{
    return m->err.code != NULL;
}

/* Rejects message m for `e` (its item goes). */
static void reject(batch_msg_t *m, const og_err_t *e)
{
    og_send_item_free(m->item);
    m->item = NULL;
    m->err = *e;
}

/* ---- variables ------------------------------------------------------------------------------- */

/* `s` with each {{key}} replaced by the string vars[key] (the placeholders of a template's
 * body: og_tpl_fill), as a new JSON string; NULL with missing_variable (field
 * variables.<key>) when a key has no value. */
static json_t *fill(const char *s, const json_t *vars, og_err_t *err)
{
    char missing[64] = "";
    char *text = og_tpl_fill(s, vars, missing, sizeof(missing));
    if (text == NULL) {
        if (missing[0] == '\0')
            return og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory"), NULL;
        og_err_fail(err, OG_E_MISSING_VARIABLE, NULL, "{{%s}} has no value in variables", missing);
        snprintf(err->field, sizeof(err->field), "variables.%s", missing);
        return NULL;
    }
    json_t *out = json_string(text);
    free(text);
    if (out == NULL)
        og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
    return out;
}

/* Fills the string obj[key] in place (anything else is left to the send's checks). */
static bool fill_field(json_t *obj, const char *key, const json_t *vars, og_err_t *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return true;
    json_t *f = fill(json_string_value(v), vars, err);
    return f != NULL && json_object_set_new(obj, key, f) == 0;
}

/* The text and the template's parameter values (a list or an object of strings, and each
 * button's parameter) of message `m`, filled. */
static bool fill_message(json_t *m, const json_t *vars, og_err_t *err)
{
    if (!fill_field(m, "text", vars, err))
        return false;
    json_t *tpl = json_object_get(m, "template");
    if (!json_is_object(tpl))
        return true;
    json_t *params = json_object_get(tpl, "parameters"), *v;
    if (json_is_array(params)) {
        size_t i;
        json_array_foreach(params, i, v)
        {
            if (!json_is_string(v))
                continue;
            json_t *f = fill(json_string_value(v), vars, err);
            if (f == NULL || json_array_set_new(params, i, f) != 0)
                return false;
        }
    } else if (json_is_object(params)) {
        const char *k;
        json_object_foreach(params, k, v)
        {
            if (!fill_field(params, k, vars, err))
                return false;
        }
    }
    json_t *buttons = json_object_get(tpl, "buttons");
    size_t i;
    json_array_foreach(buttons, i, v)
    {
        if (json_is_object(v) && !fill_field(v, "parameter", vars, err))
            return false;
    }
    return true;
}

/* A message's fields: a send's and its variables. */
static const char *const message_fields[] = {OG_SEND_FIELDS, "variables", NULL};

/* The variables of a message: its own over the defaults', every value a string. */
static json_t *variables_of(const json_t *defaults, const json_t *msg, og_err_t *err)
{
    json_t *vars = json_object();
    const json_t *from[2] = {json_object_get(defaults, "variables"), json_object_get(msg, "variables")};
    for (int s = 0; s < 2; s++) {
        if (from[s] == NULL)
            continue;
        if (!json_is_object(from[s])) {
            json_decref(vars);
            og_err_fail(err, OG_E_VALIDATION_FAILED, "variables", "variables must be an object of strings");
            return NULL;
        }
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)from[s], k, v)
        {
            if (!json_is_string(v)) {
                json_decref(vars);
                og_err_fail(err, OG_E_VALIDATION_FAILED, NULL, "variables.%s must be a string", k);
                snprintf(err->field, sizeof(err->field), "variables.%s", k);
                return NULL;
            }
            json_object_set(vars, k, v);
        }
    }
    return vars;
}

/* The body of message `msg` as a send: the defaults, its own fields over them (any but a send's
 * and `variables` rejects it), its variables filled in. NULL with the message's error. */
static json_t *message_body(const json_t *defaults, const json_t *msg, og_err_t *err)
{
    if (!json_is_object(msg)) {
        og_err_fail(err, OG_E_VALIDATION_FAILED, NULL, "each message must be an object");
        return NULL;
    }
    /* The defaults' values shared, not copied (a deep copy per message was a tenth of a batch's
     * gateway CPU): filling replaces the body's own members, never a shared value, except inside
     * a template, which is copied before it is filled (a message's own template is its own). */
    json_t *body = defaults != NULL ? json_copy((json_t *)defaults) : json_object();
    json_t *vars = NULL;
    if (body == NULL) {
        og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    json_object_del(body, "variables");
    if (!og_json_known_keys(msg, message_fields, NULL, err))
        goto fail;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)msg, k, v)
    {
        if (strcmp(k, "variables") != 0)
            json_object_set(body, k, v);
    }
    json_t *tpl = json_object_get(body, "template");
    if (tpl != NULL && tpl == json_object_get(defaults, "template") &&
        json_object_set_new(body, "template", json_deep_copy(tpl)) != 0) {
        og_err_fail(err, OG_E_UNAVAILABLE, NULL, "out of memory");
        goto fail;
    }
    if ((vars = variables_of(defaults, msg, err)) == NULL || !fill_message(body, vars, err))
        goto fail;
    json_decref(vars);
    return body;
fail:
    json_decref(vars);
    json_decref(body);
    return NULL;
}

/* ---- POST /api/omni/batches -------------------------------------------------------------------- */

/* The answer's data (API.md §20): batchId (null when none was made), accepted, the references
 * in request order (null for a rejected message) and the rejections by index. */
static void write_data(const batch_req_t *b, og_jw_t *w, bool with_id)
{
    og_jw_object(w);
    og_jw_key(w, "batchId");
    if (with_id)
        og_jw_string(w, b->id);
    else
        og_jw_null(w);
    og_jw_kint(w, "accepted", (long long)b->accepted);
    og_jw_key(w, "references");
    og_jw_array(w);
    for (size_t i = 0; i < b->n; i++) {
        if (rejected(&b->msgs[i]))
            og_jw_null(w);
        else
            og_jw_string(w, og_send_item_reference(b->msgs[i].item));
    }
    og_jw_array_end(w);
    og_jw_key(w, "rejected");
    og_jw_array(w);
    for (size_t i = 0; i < b->n; i++) {
        const og_err_t *e = &b->msgs[i].err;
        if (!rejected(&b->msgs[i]))
            continue;
        og_jw_object(w);
        og_jw_kint(w, "index", (long long)i);
        og_jw_key(w, "error");
        og_jw_object(w);
        og_jw_kstring(w, "code", e->code->name);
        og_jw_key(w, "field");
        if (e->field[0])
            og_jw_string(w, e->field);
        else
            og_jw_null(w);
        og_jw_kstring(w, "message", e->message);
        og_jw_object_end(w);
        og_jw_object_end(w);
    }
    og_jw_array_end(w);
    og_jw_object_end(w);
}

/* The answer in b->response_text: 202 with the batch, or (nothing accepted) 422
 * validation_failed with the same data. False when out of memory. */
static bool build_answer(batch_req_t *b)
{
    og_err_t err = {0};
    bool none = b->accepted == 0;
    if (none)
        og_err_fail(&err, OG_E_VALIDATION_FAILED, "messages", "every message of the batch was rejected");
    b->response_status = none ? og_api_status(err.code) : 202;
    snprintf(b->response_status_s, sizeof(b->response_status_s), "%d", b->response_status);
    og_jw_t w;
    og_jw_init(&w, 256 + 48 * b->n);
    og_api_envelope_open(&w, b->response_status, none ? err.message : "Batch queued");
    write_data(b, &w, !none);
    og_api_envelope_close(&w, none ? &err : NULL);
    b->response_text = og_jw_finish(&w, &b->response_len);
    return b->response_text != NULL;
}

static void respond(batch_req_t *b)
{
    og_http_respond(b->req, b->response_status, NULL, 0, "application/json", b->response_text,
                    b->response_len);
}

static void inserted(og_db_op_t *op, og_db_status_t st)
{
    batch_req_t *b = op->arg;
    if (st != OG_DB_OK) {
        if (!og_idem_answer_lost(b->req, op, st))
            og_answer_db_failure(b->req, &b->gw->w->log, op, st, "queueing a batch failed",
                                 "database unavailable: nothing was queued");
        req_free(b);
        return;
    }
    /* Due now: this worker claims at once; scheduled: at the first sendAt. */
    if (b->gw->queue != NULL)
        og_queue_due(b->gw->queue, b->first_due_ms);
    respond(b);
    req_free(b);
}

/* The key (if any) is ours: the batch, its messages and the answer in one transaction. */
static void claimed(og_idem_t *i)
{
    batch_req_t *b = i->arg;
    if (i->answered) {
        req_free(b);
        return;
    }
    og_ids_batch(b->id, og_ids_now_us());
    if (!build_answer(b)) {
        og_api_error(b->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        req_free(b);
        return;
    }
    og_db_op_t *op = b->op;
    snprintf(b->queued_s, sizeof(b->queued_s), "%zu", b->accepted - b->scheduled);
    snprintf(b->scheduled_s, sizeof(b->scheduled_s), "%zu", b->scheduled);
    og_int_str(b->last_due_s, b->last_due_ms);
    og_q_batch_insert(&op->stmts[0], &(og_q_batch_insert_t){.tenant_id = b->auth.tenant->id,
                                                            .batch_id = b->id,
                                                            .rows = b->rows_text,
                                                            .queued = b->queued_s,
                                                            .scheduled = b->scheduled_s,
                                                            .last_due_ms = b->last_due_s});
    int n = 1;
    n += og_idem_reference_stmt(&b->idem, op, n, b->id);
    n += og_idem_complete_stmt(&b->idem, op, n, b->response_status_s, b->response_text);
    op->nstmts = n;
    op->write = true;
    op->alone = true; /* its own transaction: no request's commit waits for its 1,000 rows */
    op->done = inserted;
    op->arg = b;
    og_db_submit(b->gw->db, op);
}

/* Every template is known: the last checks and the rows; the accepted ones are queued (after
 * the key's claim), or, none accepted, the request is answered 422. */
static void finish(batch_req_t *b)
{
    og_jw_t w;
    og_jw_init(&w, 512 * b->n);
    og_jw_array(&w);
    b->first_due_ms = INT64_MAX;
    for (size_t i = 0; i < b->n; i++) {
        batch_msg_t *m = &b->msgs[i];
        og_err_t err = {0};
        if (rejected(m))
            continue;
        if (!og_send_item_finish(m->item, &w, &err)) {
            reject(m, &err);
            continue;
        }
        b->accepted++;
        b->scheduled += og_send_item_scheduled(m->item);
        int64_t due = og_send_item_due_ms(m->item);
        if (due < b->first_due_ms)
            b->first_due_ms = due;
        if (due > b->last_due_ms)
            b->last_due_ms = due;
    }
    og_jw_array_end(&w);
    b->rows_text = og_jw_finish(&w, NULL);
    const og_err_t *unavailable = NULL;
    for (size_t i = 0; i < b->n && unavailable == NULL; i++)
        if (b->msgs[i].err.code == OG_E_UNAVAILABLE)
            unavailable = &b->msgs[i].err;
    /* Out of memory, or a worker not ready (its opt-out list not loaded yet), is the request's
     * failure, not a message's rejection: 503 with the message's reason. */
    if (b->rows_text == NULL || unavailable != NULL) {
        og_api_error(b->req, OG_E_UNAVAILABLE, NULL,
                     unavailable != NULL ? unavailable->message : "out of memory");
        req_free(b);
        return;
    }
    if (b->accepted == 0) {
        if (!build_answer(b))
            og_api_error(b->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        else
            respond(b);
        req_free(b);
        return;
    }
    /* The key's lease: a request that calls no provider (budget.h), as its one write is. */
    og_idem_claim(&b->idem, b->gw->db, b->op, &b->gw->w->log, b->auth.tenant->id, "batch",
                  og_send_budget_ms(b->gw->w->cfg, 0), claimed, b);
}

static void lookup_next(batch_req_t *b);

/* The catalogue's entry for message b->next's template. */
static void tpl_found(void *arg, og_db_status_t st, const json_t *entry)
{
    batch_req_t *b = arg;
    bool at_once = b->looking; /* still set: og_tpl_lookup has not returned yet */
    b->looking = false;
    if (st != OG_DB_OK) { /* a read's failure, never the cache's: not at once */
        og_answer_db_failure(b->req, &b->gw->w->log, b->op, st, "reading a template failed",
                             "database unavailable: nothing was queued");
        req_free(b);
        return;
    }
    og_db_op_clear(b->op);
    batch_msg_t *m = &b->msgs[b->next++];
    og_err_t err = {0};
    if (!og_send_item_apply(m->item, entry, &err))
        reject(m, &err);
    if (!at_once)
        lookup_next(b);
}

/* Looks up the templates of the messages from b->next on, one at a time; a lookup the cache
 * answers comes back before og_tpl_lookup returns (the loop goes on), one read from the
 * database in tpl_found (which goes on from there). */
static void lookup_next(batch_req_t *b)
{
    while (b->next < b->n) {
        batch_msg_t *m = &b->msgs[b->next];
        const char *waba, *name, *language;
        if (rejected(m) || !og_send_item_template(m->item, &waba, &name, &language)) {
            b->next++;
            continue;
        }
        b->looking = true;
        og_tpl_lookup(b->gw->tpl, b->op, waba, name, language, tpl_found, b);
        if (b->looking) {
            b->looking = false;
            return; /* a read: tpl_found goes on from there */
        }
    }
    finish(b);
}

/* Checks each message as a send (before any template lookup). */
static void check_messages(batch_req_t *b, const json_t *defaults, const json_t *messages)
{
    for (size_t i = 0; i < b->n; i++) {
        batch_msg_t *m = &b->msgs[i];
        og_err_t err = {0};
        json_t *body = message_body(defaults, json_array_get(messages, i), &err);
        if (body == NULL) {
            m->err = err;
            continue;
        }
        if ((m->item = og_send_item_new(b->gw, b->auth.tenant)) == NULL)
            og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
        else
            og_send_item_read(m->item, body, &err);
        json_decref(body);
        if (err.code != NULL)
            reject(m, &err);
    }
}

/* The request's form: defaults an object of a send's fields (and variables), messages a
 * non-empty array of at most OMNIGATE_BATCH_MAX. The size first: 413 before anything else. */
static bool check_form(batch_req_t *b, const json_t *body, og_err_t *err)
{
    json_t *messages = json_object_get(body, "messages"), *defaults = json_object_get(body, "defaults");
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "messages", "messages must be a non-empty array");
    int max = b->gw->w->cfg->batch_max;
    if (json_array_size(messages) > (size_t)max)
        return og_err_fail(err, OG_E_BATCH_TOO_LARGE, "messages", "a batch holds at most %d messages", max);
    if (defaults != NULL && !json_is_object(defaults))
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "defaults", "defaults must be an object");
    return defaults == NULL || og_json_known_keys(defaults, message_fields, "defaults", err);
}

static void create_authed(batch_req_t *b)
{
    static const char *const allowed[] = {"defaults", "messages", NULL};
    og_err_t err = {0};
    json_t *body = og_json_decode_body(b->req, allowed, &err);
    if (body == NULL || !check_form(b, body, &err) || !og_idem_read(&b->idem, b->req, &err)) {
        json_decref(body);
        og_api_send_error(b->req, &err, NULL, NULL, NULL, 0);
        req_free(b);
        return;
    }
    json_t *messages = json_object_get(body, "messages");
    b->n = json_array_size(messages);
    if ((b->msgs = calloc(b->n, sizeof(*b->msgs))) == NULL) {
        b->n = 0;
        json_decref(body);
        og_api_error(b->req, OG_E_UNAVAILABLE, NULL, "out of memory");
        req_free(b);
        return;
    }
    check_messages(b, json_object_get(body, "defaults"), messages);
    json_decref(body);
    og_http_req_drop_input(b->req); /* all read */
    lookup_next(b);
}

/* ---- GET /api/omni/batches/{batchId}, POST .../cancel ------------------------------------------ */

static void read_done(og_db_op_t *op, og_db_status_t st);

static void submit_get(batch_req_t *b, og_db_t *pool)
{
    og_db_op_t *op = b->op;
    og_db_op_clear(op);
    og_q_batch_get(&op->stmts[0], &(og_q_batch_get_t){.tenant_id = b->tenant_id, .batch_id = b->id});
    op->nstmts = 1;
    op->done = read_done;
    op->arg = b;
    og_db_submit(pool, op);
}

static void read_done(og_db_op_t *op, og_db_status_t st)
{
    batch_req_t *b = op->arg;
    if (st != OG_DB_OK) {
        og_answer_db_failure(b->req, &b->gw->w->log, op, st,
                             b->route == ROUTE_CANCEL ? "canceling a batch failed" : "reading a batch failed",
                             "database unavailable");
    } else if (b->route == ROUTE_GET) {
        const PGresult *res = op->res[0];
        if (PQntuples(res) != 1 && !b->on_primary && b->gw->w->cfg->database_read_url != NULL) {
            /* Not (yet) on the read pool's server, a replica that may be behind: a batch just
             * made is found on the primary. */
            b->on_primary = true;
            submit_get(b, b->gw->db);
            return;
        }
        if (PQntuples(res) != 1)
            og_api_error(b->req, OG_E_NOT_FOUND, "batchId", "no batch with this id");
        else
            og_answer_raw(b->req, 200, "batch", PQgetvalue(res, 0, OG_C_BATCH_GET_ITEM), NULL);
    } else {
        const PGresult *res = op->res[0];
        if (PQgetisnull(res, 0, OG_C_BATCH_CANCEL_CANCELED)) {
            og_api_error(b->req, OG_E_NOT_FOUND, "batchId", "no batch with this id");
        } else {
            char data[48];
            snprintf(data, sizeof(data), "{\"canceled\":%s}", PQgetvalue(res, 0, OG_C_BATCH_CANCEL_CANCELED));
            og_answer_raw(b->req, 200, "canceled", data, NULL);
        }
    }
    req_free(b);
}

static void authed(og_auth_req_t *a)
{
    batch_req_t *b = (batch_req_t *)a;
    if (a->tenant == NULL) {
        req_free(b);
        return;
    }
    if (b->route == ROUTE_CREATE) {
        create_authed(b);
        return;
    }
    if (b->route == ROUTE_GET) {
        /* Counts are read as the logs are: on the read pool, not behind the write batches. */
        snprintf(b->tenant_id, sizeof(b->tenant_id), "%s", a->tenant->id);
        submit_get(b, b->gw->rdb);
        return;
    }
    og_db_op_t *op = b->op;
    og_db_op_clear(op);
    og_q_batch_cancel(&op->stmts[0], &(og_q_batch_cancel_t){.tenant_id = a->tenant->id, .batch_id = b->id});
    op->nstmts = 1;
    op->write = true;
    op->done = read_done;
    op->arg = b;
    og_db_submit(b->gw->db, op);
}

/* A request on `route`, its batch id read from the path; NULL after answering. */
static batch_req_t *req_new(og_http_req_t *req, const og_route_match_t *m, og_gw_t *gw, route_t route)
{
    batch_req_t *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->op = og_db_op_new()) == NULL) {
        free(b);
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "out of memory");
        return NULL;
    }
    b->gw = gw;
    b->req = req;
    b->route = route;
    /* Batch ids are "kb_" and 26 characters; anything else names no batch. */
    if (route != ROUTE_CREATE &&
        (!og_route_param(m, "batchId", b->id, sizeof(b->id)) || !og_ids_batch_valid(b->id))) {
        req_free(b);
        og_api_error(req, OG_E_NOT_FOUND, "batchId", "no batch with this id");
        return NULL;
    }
    return b;
}

static void consent_loaded(og_consent_wait_t *w)
{
    batch_req_t *b = container_of(w, batch_req_t, consent_wait);
    og_auth_tenant(b->gw->auth, &b->auth);
}

static void serve(og_http_req_t *req, const og_route_match_t *m, void *ctx, route_t route)
{
    og_gw_t *gw = og_gw(ctx);
    batch_req_t *b = req_new(req, m, gw, route);
    if (b == NULL)
        return;
    b->auth.req = req;
    b->auth.scope = route == ROUTE_GET ? OG_SCOPE_LOGS : OG_SCOPE_SEND;
    b->auth.unified = true;
    b->auth.done = authed;
    b->auth.op = b->op;
    b->consent_wait.done = consent_loaded;
    if (route == ROUTE_CREATE) /* its messages are checked as it is read */
        og_consent_wait(gw->consent, &b->consent_wait);
    else
        og_auth_tenant(gw->auth, &b->auth);
}

void og_batch_create(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_CREATE);
}

void og_batch_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_GET);
}

void og_batch_cancel(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    serve(req, m, ctx, ROUTE_CANCEL);
}

void og_batch_admin_get(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    og_gw_t *gw = og_gw(ctx);
    char id[37];
    if (!og_auth_admin_tenant(req, m, gw->w->cfg->admin_token, id))
        return;
    if (gw->rdb == NULL) {
        og_api_error(req, OG_E_UNAVAILABLE, NULL, "no database configured");
        return;
    }
    batch_req_t *b = req_new(req, m, gw, ROUTE_GET);
    if (b == NULL)
        return;
    memcpy(b->tenant_id, id, sizeof(b->tenant_id));
    submit_get(b, gw->rdb);
}
