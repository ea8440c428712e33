/*
 * Fuzzes the Meta webhook (POST /webhooks/meta, src/product/webhooks_in.c): the parser of
 * WhatsApp Cloud API status notifications and the X-Hub-Signature-256 check (HMAC-SHA256, hex)
 * over the raw body. An input is the body; fuzz_webhook_json says what is checked. Then the
 * whole body as the route reads it: statuses, template changes and inbound messages (API.md
 * §21, fuzz_check_inbound), all or nothing as the statuses alone.
 */
#include <stdint.h>

#include "fuzz.h"
#include "omnigate/callbacks/webhooks_in.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_webhook_json(og_webhook_parse_meta, "whatsapp_meta", SIZE_MAX, OG_HMAC_SHA256, data, size);
    og_err_t err = {0};
    json_t *templates = NULL, *inbound = NULL;
    json_t *statuses =
        og_webhook_parse_meta_all((const char *)data, size, FUZZ_NOW, &templates, &inbound, &err);
    FUZZ_CHECK((statuses == NULL) == (inbound == NULL));
    if (statuses != NULL) {
        fuzz_check_statuses(statuses, "whatsapp_meta");
        fuzz_check_inbound(inbound, "whatsapp_meta");
    }
    json_decref(statuses);
    json_decref(templates);
    json_decref(inbound);
    return 0;
}
