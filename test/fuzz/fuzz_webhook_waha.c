/*
 * Fuzzes the WAHA webhook (POST /webhooks/waha, src/product/webhooks_in.c): the parser of
 * message.ack events, one status at most per event, and the X-Webhook-Hmac check
 * (HMAC-SHA512, hex) over the raw body. An input is the body; fuzz_webhook_json says what is
 * checked. Then the body as the route reads it, `message` events too (API.md §21): at most one
 * inbound message (fuzz_check_inbound) or one left out, never both.
 */
#include <string.h>

#include "fuzz.h"
#include "omnigate/callbacks/webhooks_in.h"
#include "omnigate/qr/sessions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_webhook_json(og_webhook_parse_waha, "whatsapp_qr", 1, OG_HMAC_SHA512, data, size);
    og_err_t err = {0};
    json_t *inbound = NULL;
    json_t *session = NULL;
    int ignored = 0;
    json_t *statuses =
        og_webhook_parse_waha_all((const char *)data, size, FUZZ_NOW, &inbound, &ignored, &session, &err);
    if (statuses != NULL) {
        fuzz_check_statuses(statuses, "whatsapp_qr");
        if (inbound != NULL)
            fuzz_check_inbound(inbound, "whatsapp_qr");
        FUZZ_CHECK(json_array_size(inbound) + (size_t)ignored <= 1);
        /* A session.status event: its session a valid name, its status a string, its time set. */
        if (session != NULL) {
            const char *name = json_string_value(json_object_get(session, "session"));
            FUZZ_CHECK(name != NULL && og_qr_session_name_valid(name, strlen(name)));
            FUZZ_CHECK(json_is_string(json_object_get(session, "status")));
            FUZZ_CHECK(json_number_value(json_object_get(session, "atMs")) > 0);
        }
    } else {
        FUZZ_CHECK(session == NULL);
    }
    json_decref(statuses);
    json_decref(inbound);
    json_decref(session);
    return 0;
}
