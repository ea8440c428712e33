/*
 * One message of a batch (API.md §20) checked as a send is: the rules of POST /api/omni/send
 * (send.c) applied to a body without a request of its own, so that a batch's messages and a
 * send's body can never be checked differently. Responsible for reading, checking and writing
 * one queued message's row; not for the batch (queue/batch_api.h), its variables or its
 * answer.
 *
 * Use: og_send_item_read; when og_send_item_template says so, look the template up
 * (templates/catalogue.h) and hand the entry to og_send_item_apply; then og_send_item_finish
 * writes the message's row. A false return leaves the message's error (its field named as in a
 * send's body) in `err`.
 */
#ifndef OMNIGATE_MESSAGING_SEND_ITEM_H
#define OMNIGATE_MESSAGING_SEND_ITEM_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "omnigate/api.h"
#include "omnigate/app/ctx.h"
#include "omnigate/jw.h"
#include "omnigate/tenants/auth.h"

/* The fields a send's body may have: OG_SEND_FIELDS, and og_send_fields with a NULL after them. */
#define OG_SEND_FIELDS                                                                                       \
    "to", "text", "template", "channels", "deliveryMode", "whatsappFrom", "sender", "fallbackOn",            \
        "fallbackAfterSeconds", "queue", "sendAt", "validitySeconds", "priority"
extern const char *const og_send_fields[];

typedef struct send_ctx og_send_item_t;

/* A message to check for `tenant` (borrowed: it must outlive the item). NULL when out of memory. */
og_send_item_t *og_send_item_new(og_gw_t *gw, og_tenant_t *tenant);
void og_send_item_free(og_send_item_t *it);

/* Reads and checks `body` (a send's fields, its own: `queue` is set true in it; false or
 * anything else is refused) against the tenant's settings. */
bool og_send_item_read(og_send_item_t *it, json_t *body, og_err_t *err);

/* True when the message needs a catalogue entry before og_send_item_finish: its WABA, name and
 * language (borrowed from the item). */
bool og_send_item_template(const og_send_item_t *it, const char **waba_id, const char **name,
                           const char **language);

/* The entry og_tpl_lookup found (NULL: not in the catalogue). */
bool og_send_item_apply(og_send_item_t *it, const json_t *entry, og_err_t *err);

/* The last checks (text, SMS segments, a number remembered as not on WhatsApp by this worker),
 * then the message's reference, and its row as one JSON object written to `w` (the parameters
 * of queue_insert by name, as og_batch_insert reads them). */
bool og_send_item_finish(og_send_item_t *it, og_jw_t *w, og_err_t *err);

/* After og_send_item_finish: its reference, its due time (ms since the epoch), and whether it
 * is due later (status scheduled) rather than now (queued). */
const char *og_send_item_reference(const og_send_item_t *it);
int64_t og_send_item_due_ms(const og_send_item_t *it);
bool og_send_item_scheduled(const og_send_item_t *it);

#endif
