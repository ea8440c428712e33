/*
 * Fuzzes the WAHA webhook (POST /webhooks/waha, src/product/webhooks_in.c): the parser of
 * message.ack events, one status at most per event, and the X-Webhook-Hmac check
 * (HMAC-SHA512, hex) over the raw body. An input is the body; fuzz_webhook_json says what is
 * checked.
 */
#include "fuzz.h"
#include "omnigate/callbacks/webhooks_in.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_webhook_json(og_webhook_parse_waha, "whatsapp_qr", 1, OG_HMAC_SHA512, data, size);
    return 0;
}
