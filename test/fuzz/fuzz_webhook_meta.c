/*
 * Fuzzes the Meta webhook (POST /webhooks/meta, src/product/webhooks_in.c): the parser of
 * WhatsApp Cloud API status notifications and the X-Hub-Signature-256 check (HMAC-SHA256, hex)
 * over the raw body. An input is the body; fuzz_webhook_json says what is checked.
 */
#include <stdint.h>

#include "fuzz.h"
#include "omnigate/callbacks/webhooks_in.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_webhook_json(og_webhook_parse_meta, "whatsapp_meta", SIZE_MAX, OG_HMAC_SHA256, data, size);
    return 0;
}
