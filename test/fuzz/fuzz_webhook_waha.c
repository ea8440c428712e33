/*
 * Fuzzes the WAHA webhook (POST /webhooks/waha, src/product/webhooks_in.c): the parser of
 * message.ack events, one status at most per event, and the X-Webhook-Hmac check
 * (HMAC-SHA512, hex) over the raw body. An input is the body; fuzz_webhook_json says what is
 * checked. Then the body as the route reads it, `message` events too (API.md §21): at most one
 * inbound message (fuzz_check_inbound) or one left out, never both.
 */
#include "fuzz.h"
#include "omnigate/callbacks/webhooks_in.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_webhook_json(og_webhook_parse_waha, "whatsapp_qr", 1, OG_HMAC_SHA512, data, size);
    og_err_t err = {0};
    json_t *inbound = NULL;
    int ignored = 0;
    json_t *statuses =
        og_webhook_parse_waha_all((const char *)data, size, FUZZ_NOW, &inbound, &ignored, &err);
    if (statuses != NULL) {
        fuzz_check_statuses(statuses, "whatsapp_qr");
        if (inbound != NULL)
            fuzz_check_inbound(inbound, "whatsapp_qr");
        FUZZ_CHECK(json_array_size(inbound) + (size_t)ignored <= 1);
    }
    json_decref(statuses);
    json_decref(inbound);
    return 0;
}
