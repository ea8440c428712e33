/*
 * What the fuzz harnesses share. Each harness defines LLVMFuzzerTestOneInput and is built twice:
 * as a libFuzzer target (-Dfuzz=true, clang) and, on every test run, as a plain program whose
 * main (replay.c) runs it over its corpus directory. FUZZ_CHECK stops loudly when an invariant
 * breaks, whatever NDEBUG says, so both builds report the input that broke it.
 */
#ifndef OG_FUZZ_H
#define OG_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#include "omnigate/error.h"
#include "omnigate/hmac.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond);                     \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

/* Checks a refusal the way a client would get it: `err` has one of `codes` (NULL-terminated),
 * that code's HTTP status is a 4xx, and the error envelope of API.md §0 builds and reads back
 * with the same code and field. */
void fuzz_check_error(const og_err_t *err, const og_errcode_t *const *codes);

/* True when s[0..len) is well-formed UTF-8 (what jansson accepts in a string). */
bool fuzz_utf8_valid(const char *s, size_t len);

/* Checks `statuses`, the array a webhook parser returned, against the shape its callers rely on
 * (webhooks_in.h): every element names `channel`, a provider message id, a known status and a
 * finite time, failures carry a deliveryError, nothing else; and the array serializes (as the
 * route does before recording it). */
void fuzz_check_statuses(json_t *statuses, const char *channel);

/* Checks the inbound messages a parser returned (webhooks_in.h, API.md §21): an array whose
 * elements name `channel`, a provider message id under 128 bytes, an E.164 sender, a route of 1
 * to 64 bytes, a type of 1-32 of a-z and _, a finite time, and only the item's keys (text,
 * number, phoneNumberId, session optional strings); and the array serializes. */
void fuzz_check_inbound(json_t *items, const char *channel);

/* A webhook parser of webhooks_in.h, and the time the harnesses give it as "now". */
typedef json_t *(*og_webhook_parse_fn)(const char *body, size_t len, double now, og_err_t *err);
#define FUZZ_NOW 1700000000.25

/* Runs `parse` on a body and checks the outcome: a refusal with one of `codes`, or at most `max`
 * statuses on `channel` (fuzz_check_statuses). Returns the statuses (a new reference) or NULL. */
json_t *fuzz_webhook_parse(og_webhook_parse_fn parse, const char *channel, size_t max,
                           const og_errcode_t *const *codes, const char *body, size_t size);

/* A JSON webhook body through its route's steps: fuzz_webhook_parse with the codes invalid_json
 * and invalid_payload; and the signature check by `alg` accepts the body's own HMAC in hex of
 * either case, and refuses it with one digit changed or one missing. */
void fuzz_webhook_json(og_webhook_parse_fn parse, const char *channel, size_t max, og_hmac_alg_t alg,
                       const uint8_t *data, size_t size);

#endif
