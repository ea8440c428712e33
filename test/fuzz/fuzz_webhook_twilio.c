/*
 * Fuzzes the Twilio webhook (POST /webhooks/twilio, src/product/webhooks_in.c): the parser of
 * SMS status callbacks (an application/x-www-form-urlencoded body) and the X-Twilio-Signature
 * check. An input is the body.
 *
 * Checked: a body is refused whole with invalid_payload, or gives at most one status on channel
 * sms at the time of receipt (fuzz_check_statuses); a form that does not decode is refused by
 * both; for a form that decodes, the signature check accepts the signature computed here the way
 * Twilio documents it (base64 of HMAC-SHA1 over the URL and every field, sorted, name then value)
 * and refuses it with one character changed. The same body as an incoming message (POST
 * /webhooks/twilio/inbound, API.md §21): refused with invalid_payload, or at most one inbound
 * message (fuzz_check_inbound) at the time of receipt or one left out, never both.
 */
#include <string.h>

#include <openssl/evp.h>

#include "fuzz.h"
#include "omnigate/app/errors.h"
#include "omnigate/router.h"
#include "omnigate/callbacks/webhooks_in.h"

#define MAX_FIELDS 128 /* webhooks_in.c refuses a form with more */

static const og_errcode_t *const codes[] = {OG_E_INVALID_PAYLOAD, NULL};
static const char token[] = "twilio-auth-token";
static const char url[] = "https://gw.example.com/webhooks/twilio?tenant=a";

typedef struct pair {
    char *name, *value;
} pair_t;

static int pair_cmp(const void *a, const void *b)
{
    const pair_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : strcmp(x->value, y->value);
}

/* Decodes the form into `pairs` (strings in `buf`); the number of fields, or -1 when a field
 * does not decode or there are too many. */
static int decode_form(const char *body, size_t len, pair_t *pairs, char *buf)
{
    size_t pos = 0;
    int n = 0;
    og_form_pair_t p;
    while (og_form_next(body, len, &pos, &p)) {
        if (n == MAX_FIELDS)
            return -1;
        int kn = og_form_decode(p.key, p.key_len, buf, p.key_len + 1);
        if (kn < 0)
            return -1;
        pairs[n].name = buf;
        buf += kn + 1;
        int vn = og_form_decode(p.value != NULL ? p.value : "", p.value_len, buf, p.value_len + 1);
        if (vn < 0)
            return -1;
        pairs[n++].value = buf;
        buf += vn + 1;
    }
    return n;
}

static void check_signature(const char *body, size_t size)
{
    pair_t pairs[MAX_FIELDS];
    char *buf = malloc(size + 2 * MAX_FIELDS + 1);
    FUZZ_CHECK(buf != NULL);
    int n = decode_form(body, size, pairs, buf);
    const char *garbage = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";
    if (n < 0) {
        FUZZ_CHECK(!og_webhook_twilio_signed(token, url, body, size, garbage, strlen(garbage)));
        free(buf);
        return;
    }
    qsort(pairs, (size_t)n, sizeof(pairs[0]), pair_cmp);
    const void *parts[1 + 2 * MAX_FIELDS];
    size_t lens[1 + 2 * MAX_FIELDS];
    parts[0] = url;
    lens[0] = strlen(url);
    for (int i = 0; i < n; i++) {
        parts[1 + 2 * i] = pairs[i].name;
        lens[1 + 2 * i] = strlen(pairs[i].name);
        parts[2 + 2 * i] = pairs[i].value;
        lens[2 + 2 * i] = strlen(pairs[i].value);
    }
    unsigned char mac[OG_HMAC_MAX];
    size_t maclen = og_hmac(OG_HMAC_SHA1, token, strlen(token), parts, lens, 1 + 2 * (size_t)n, mac);
    FUZZ_CHECK(maclen == 20);
    char sig[64];
    int siglen = EVP_EncodeBlock((unsigned char *)sig, mac, (int)maclen);
    FUZZ_CHECK(siglen == 28);
    FUZZ_CHECK(og_webhook_twilio_signed(token, url, body, size, sig, (size_t)siglen));
    size_t k = size % 27; /* not the padding */
    sig[k] = sig[k] == 'A' ? 'B' : 'A';
    FUZZ_CHECK(!og_webhook_twilio_signed(token, url, body, size, sig, (size_t)siglen));
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    json_t *statuses = fuzz_webhook_parse(og_webhook_parse_twilio, "sms", 1, codes, body, size);
    json_t *at = json_object_get(json_array_get(statuses, 0), "at");
    FUZZ_CHECK(at == NULL || json_number_value(at) == FUZZ_NOW);
    json_decref(statuses);
    og_err_t err = {0};
    int ignored = 0;
    json_t *inbound = og_webhook_parse_twilio_inbound(body, size, FUZZ_NOW, &ignored, &err);
    if (inbound == NULL) {
        FUZZ_CHECK(err.code == OG_E_INVALID_PAYLOAD);
    } else {
        fuzz_check_inbound(inbound, "sms");
        FUZZ_CHECK(json_array_size(inbound) + (size_t)ignored <= 1);
        at = json_object_get(json_array_get(inbound, 0), "at");
        FUZZ_CHECK(at == NULL || json_number_value(at) == FUZZ_NOW);
    }
    json_decref(inbound);
    check_signature(body, size);
    return 0;
}
