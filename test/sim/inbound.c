/*
 * Inbound messages of omnigate-sim. POST /__sim/inbound makes one simulated provider post the
 * gateway a message a customer sent, as the real provider does (API.md §21): Meta's
 * whatsapp_business_account "messages" webhook, WAHA's "message" event, Twilio's form-encoded
 * incoming-message webhook. They go to the callback URL, signed like the status callbacks, on
 * the same outbound client; callbacks.c lends its signing, request set-up and records (sim.h).
 *
 * Unlike a status callback, an inbound message is one POST made while the control request
 * waits, and never retried: the control request is answered with what the gateway answered once
 * that POST has ended. A draining worker closes the client, which cancels the POST; its control
 * request is then answered 503 at once, as every answer that waits is answered when the
 * simulator drains.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "sim.h"
#include "omnigate/json.h"
#include "omnigate/log.h"
#include "omnigate/smsenc.h"
#include "omnigate/util.h"

/* A provider message id given in the request: at most this many bytes. */
#define INBOUND_ID_MAX 128
/* Characters of a text at most: WhatsApp's limit, and Twilio's for a (reassembled) SMS. */
#define INBOUND_TEXT_MAX     4096
#define INBOUND_SMS_TEXT_MAX 1600
/* Bytes of the gateway's answer given back in the control answer. */
#define INBOUND_ANSWER_BODY_MAX 4096
/* `"signature": "bad"` signs with this key instead of the provider's secret: a well-formed
 * signature that does not verify. */
#define INBOUND_WRONG_KEY "omnigate-sim-wrong-signing-key"
/* What Meta's contacts[].profile.name says when the request names no one. */
#define INBOUND_PROFILE_NAME "Sim Customer"
/* The AccountSid Twilio's webhook carries when OMNIGATE_SMS_ACCOUNT_SID is unset. */
#define INBOUND_TWILIO_ACCOUNT "AC5ef8732a3c49700934481addd5ce1659"
/* The pushName of the session's own number in WAHA's envelope. */
#define WAHA_ME_NAME "Omnigate Sim"

#define DIGITS "0123456789"
#define HEX    "0123456789abcdefABCDEF"

typedef enum sig_mode { SIG_VALID, SIG_BAD, SIG_NONE } sig_mode_t;

/* A POST /__sim/inbound body once checked. Strings are borrowed from the decoded body. */
typedef struct inbound_msg {
    sim_channel_t ch;
    sig_mode_t sig;
    char from[24];    /* the sender's digits */
    const char *text; /* NULL only for a Meta image without a caption */
    const char *id;   /* the provider message id, or NULL: one is made up */
    long long timestamp;
    /* Meta */
    const char *phone_id, *display, *waba, *name, *type;
    /* WAHA */
    const char *session;
    char me[24]; /* the session's own digits; "" when not given */
    /* Twilio */
    char to[24]; /* the number the message was sent to, digits */
} inbound_msg_t;

/* One inbound POST in flight. Owned by itself from og_hc_start on: its done callback answers
 * the control request and frees it. The control request keeps its connection, hence the worker,
 * alive until then, so the simulator never stops under it. */
typedef struct inbound_op {
    og_hc_req_t hreq;
    sim_t *s;
    og_http_req_t *req; /* the control request, answered once the POST has ended */
    sim_channel_t ch;
    int64_t sent_at;
    char id[INBOUND_ID_MAX + 1];
} inbound_op_t;

/* The fields each provider's request may have. */
static const char *const fields_of[SIM_CH__COUNT][12] = {
    [SIM_CH_META] = {"provider", "phoneNumberId", "displayPhoneNumber", "wabaId", "from", "text", "type",
                     "id", "name", "timestamp", "signature", NULL},
    [SIM_CH_QR] = {"provider", "session", "me", "from", "text", "id", "timestamp", "signature", NULL},
    [SIM_CH_SMS] = {"provider", "to", "from", "text", "id", "signature", NULL},
};

static const char *const meta_types[] = {"text", "button", "interactive", "image", NULL};

/* ---- checking the request ----------------------------------------------------------------- */

/* 1 to `max` bytes of visible ASCII (no space). */
static bool visible(const char *v, size_t max)
{
    size_t n = strlen(v);
    for (size_t i = 0; i < n; i++)
        if (v[i] <= ' ' || v[i] > '~')
            return false;
    return n > 0 && n <= max;
}

/* E.164: '+' then 8 to 15 digits, the digits into out. */
static bool e164(const char *v, char out[24])
{
    size_t n = strlen(v + (v[0] == '+'));
    if (v[0] != '+' || n < 8 || n > 15 || strspn(v + 1, DIGITS) != n)
        return false;
    memcpy(out, v + 1, n + 1);
    return true;
}

/* The optional string `name`, which must be 1 to `max` bytes of `set` (NULL: any UTF-8). */
static bool take_string(json_t *body, const char *name, size_t max, const char *set, const char *what,
                        const char **out, og_err_t *err)
{
    if (!og_json_get_string(body, name, false, out, err))
        return false;
    const char *v = *out;
    bool ok = v == NULL || (set != NULL ? sim_chars_in(v, max, set) : v[0] != '\0' && strlen(v) <= max);
    return ok || sim_field_fail(err, name, what);
}

static bool take_meta(json_t *body, inbound_msg_t *m, og_err_t *err)
{
    m->type = "text";
    if (!og_json_get_string(body, "phoneNumberId", true, &m->phone_id, err) ||
        !take_string(body, "displayPhoneNumber", 20, DIGITS, "must be 1 to 20 digits", &m->display, err) ||
        !take_string(body, "wabaId", 20, DIGITS, "must be a WABA id: 1 to 20 digits", &m->waba, err) ||
        !take_string(body, "name", 256, NULL, "must be a profile name of 1 to 256 bytes", &m->name, err) ||
        !og_json_get_string(body, "type", false, &m->type, err))
        return false;
    if (!sim_chars_in(m->phone_id, 20, DIGITS))
        return sim_field_fail(err, "phoneNumberId", "must be a phone number id: 1 to 20 digits");
    for (size_t i = 0; meta_types[i] != NULL; i++)
        if (strcmp(m->type, meta_types[i]) == 0)
            return true;
    return sim_field_fail(err, "type", "must be text, button, interactive or image");
}

static bool take_waha(json_t *body, inbound_msg_t *m, og_err_t *err)
{
    const char *me = NULL;
    if (!og_json_get_string(body, "session", true, &m->session, err) ||
        !og_json_get_string(body, "me", false, &me, err))
        return false;
    if (m->session[0] == '\0' || strlen(m->session) > SIM_SENDER_MAX)
        return sim_field_fail(err, "session", "must be a session name of 1 to 64 bytes");
    if (me != NULL && !sim_chars_in(me + (me[0] == '+'), 20, DIGITS))
        return sim_field_fail(err, "me", "must be the session's own number: 1 to 20 digits");
    snprintf(m->me, sizeof(m->me), "%s", me != NULL ? me + (me[0] == '+') : "");
    return true;
}

static bool take_twilio(json_t *body, inbound_msg_t *m, og_err_t *err)
{
    const char *to = NULL;
    if (!og_json_get_string(body, "to", true, &to, err))
        return false;
    if (!e164(to, m->to))
        return sim_field_fail(err, "to", "must be an E.164 number: + and 8 to 15 digits");
    if (m->id != NULL &&
        !(strncmp(m->id, "SM", 2) == 0 && strlen(m->id) == 34 && sim_chars_in(m->id + 2, 32, HEX)))
        return sim_field_fail(err, "id", "must be a message sid: SM and 32 hex digits");
    return true;
}

/* What the fields common to the providers say, checked: from, text, id, timestamp, signature. */
static bool take_common(json_t *body, inbound_msg_t *m, og_err_t *err)
{
    const char *from = NULL, *sig = NULL;
    long long ts = -1;
    if (!og_json_get_string(body, "from", true, &from, err) ||
        !og_json_get_string(body, "text", false, &m->text, err) ||
        !og_json_get_string(body, "id", false, &m->id, err) ||
        !og_json_get_int(body, "timestamp", false, 0, 9999999999LL, &ts, err) ||
        !og_json_get_string(body, "signature", false, &sig, err))
        return false;
    if (!e164(from, m->from))
        return sim_field_fail(err, "from", "must be an E.164 number: + and 8 to 15 digits");
    m->timestamp = ts >= 0 ? ts : (long long)time(NULL);
    if (m->id != NULL && !visible(m->id, INBOUND_ID_MAX))
        return sim_field_fail(err, "id", "must be 1 to 128 visible ASCII characters");
    if (sig != NULL && strcmp(sig, "valid") != 0 && strcmp(sig, "bad") != 0 && strcmp(sig, "none") != 0)
        return sim_field_fail(err, "signature", "must be valid, bad or none");
    m->sig = sig == NULL || strcmp(sig, "valid") == 0 ? SIG_VALID
             : strcmp(sig, "bad") == 0                ? SIG_BAD
                                                      : SIG_NONE;
    return true;
}

/* The text: required but for a Meta image (whose caption it is), 1 to 4096 characters (an SMS:
 * 1600). Blank is fine: a customer may send that. */
static bool take_text(inbound_msg_t *m, og_err_t *err)
{
    size_t max = m->ch == SIM_CH_SMS ? INBOUND_SMS_TEXT_MAX : INBOUND_TEXT_MAX, n = 0;
    if (m->text == NULL) {
        if (m->ch == SIM_CH_META && strcmp(m->type, "image") == 0)
            return true;
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "text", "text is required");
    }
    (void)og_text_validate(m->text, strlen(m->text), &n); /* n: its characters, even when blank */
    if (n == 0 || n > max)
        return og_err_fail(err, OG_E_VALIDATION_FAILED, "text", "text must be 1 to %zu characters", max);
    return true;
}

/* The request body into m, checked; false with the field at fault in err. */
static bool inbound_take(json_t *body, inbound_msg_t *m, og_err_t *err)
{
    const char *provider = NULL;
    if (!og_json_get_string(body, "provider", true, &provider, err))
        return false;
    int ch = 0;
    while (ch < SIM_CH__COUNT && strcmp(provider, sim_cb_provider_name((sim_channel_t)ch)) != 0)
        ch++;
    if (ch == SIM_CH__COUNT)
        return sim_field_fail(err, "provider", "must be meta, waha or twilio");
    m->ch = (sim_channel_t)ch;
    if (!og_json_known_keys(body, fields_of[ch], NULL, err) || !take_common(body, m, err))
        return false;
    bool ok = ch == SIM_CH_META ? take_meta(body, m, err)
              : ch == SIM_CH_QR ? take_waha(body, m, err)
                                : take_twilio(body, m, err);
    return ok && take_text(m, err);
}

/* ---- the three webhooks ------------------------------------------------------------------- */

/* A media id (16 digits) and the base64 SHA-256 Meta gives with it. */
static void meta_media(sim_t *s, char id[17], char sha[45])
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    id[0] = '1';
    sim_rand_chars(s, id + 1, 15, DIGITS);
    if (EVP_Digest(id, 16, digest, &n, EVP_sha256(), NULL) != 1 || n != 32)
        memset(digest, 0, n = 32);
    EVP_EncodeBlock((unsigned char *)sha, digest, (int)n);
}

/* messages[0] of Meta's webhook: {"from","id","timestamp","type"} and the type's own object. */
static json_t *meta_message(sim_t *s, const inbound_msg_t *m, const char *id, const char *display)
{
    char ts[24];
    snprintf(ts, sizeof(ts), "%lld", m->timestamp);
    json_t *msg =
        json_pack("{s:s, s:s, s:s, s:s}", "from", m->from, "id", id, "timestamp", ts, "type", m->type);
    if (msg == NULL)
        return NULL;
    bool button = strcmp(m->type, "button") == 0, interactive = strcmp(m->type, "interactive") == 0;
    if (button || interactive) {
        /* A reply to one of the business's messages: the context names it. */
        char replied_to[128];
        sim_meta_wamid(s, m->from, false, replied_to);
        json_object_set_new(msg, "context", json_pack("{s:s, s:s}", "from", display, "id", replied_to));
    }
    json_t *part;
    if (button) {
        part = json_pack("{s:s, s:s}", "payload", m->text, "text", m->text);
    } else if (interactive) {
        part = json_pack("{s:s, s:{s:s, s:s}}", "type", "button_reply", "button_reply", "id", "b1", "title",
                         m->text);
    } else if (strcmp(m->type, "image") == 0) {
        char media[17], sha[45];
        meta_media(s, media, sha);
        part = json_object();
        if (part != NULL && m->text != NULL)
            json_object_set_new(part, "caption", json_string(m->text));
        if (part != NULL)
            json_object_update_new(
                part, json_pack("{s:s, s:s, s:s}", "mime_type", "image/jpeg", "sha256", sha, "id", media));
    } else {
        part = json_pack("{s:s}", "body", m->text);
    }
    if (part == NULL || json_object_set_new(msg, m->type, part) != 0) {
        json_decref(msg);
        return NULL;
    }
    return msg;
}

static bool meta_request(sim_t *s, og_hc_req_t *r, const inbound_msg_t *m, const char *id)
{
    /* entry[].id is the WABA: given, else the one the number is bound to (template catalogues). */
    const sim_waba_t *bound = sim_waba_of_phone(s, m->phone_id);
    const char *waba = m->waba != NULL ? m->waba : bound != NULL ? bound->id : "0";
    const char *display = m->display != NULL ? m->display : SIM_META_DISPLAY_NUMBER;
    json_t *msg = meta_message(s, m, id, display);
    json_t *v =
        json_pack("{s:s, s:[{s:s, s:[{s:s, s:{s:s, s:{s:s, s:s}, s:[{s:{s:s}, s:s}], s:[o]}}]}]}", "object",
                  "whatsapp_business_account", "entry", "id", waba, "changes", "field", "messages", "value",
                  "messaging_product", "whatsapp", "metadata", "display_phone_number", display,
                  "phone_number_id", m->phone_id, "contacts", "profile", "name",
                  m->name != NULL ? m->name : INBOUND_PROFILE_NAME, "wa_id", m->from, "messages", msg);
    return sim_json_body(r, v);
}

/* WAHA's webhook envelope around a WEBJS message (devlikeapro/waha: WebhookConductorCore's
 * callWebhook, WhatsappSessionWebJSCore's toWAMessage): fields the engine leaves undefined
 * (media, mediaUrl, location, replyTo) are absent, as JSON.stringify drops them. */
static bool waha_request(sim_t *s, og_hc_req_t *r, const inbound_msg_t *m, const char *id)
{
    char from[32], me[32], evt[SIM_WAHA_EVENT_ID_SIZE];
    snprintf(from, sizeof(from), "%s@c.us", m->from);
    snprintf(me, sizeof(me), "%s@c.us", m->me);
    sim_waha_event_id(s, evt);
    /* Without `me` (a session whose number is unknown) neither the envelope's me nor payload.to. */
    const char *to = m->me[0] != '\0' ? me : NULL;
    json_t *me_info = to != NULL ? json_pack("{s:s, s:s}", "id", me, "pushName", WAHA_ME_NAME) : NULL;
    json_t *v =
        json_pack("{s:s, s:I, s:s, s:s, s:o*, s:{s:s, s:I, s:s, s:b, s:s*, s:s, s:b, s:i, s:s, s:[]}, "
                  "s:s, s:o}",
                  "id", evt, "timestamp", (json_int_t)sim_now_ms(), "event", "message", "session", m->session,
                  "me", me_info, "payload", "id", id, "timestamp", (json_int_t)m->timestamp, "from", from,
                  "fromMe", 0, "to", to, "body", m->text, "hasMedia", 0, "ack", 1, "ackName", "SERVER",
                  "vCards", "engine", SIM_WAHA_ENGINE, "environment", sim_waha_environment());
    return sim_json_body(r, v);
}

/* Twilio's incoming-message webhook: the fields of an inbound SMS in the order Twilio sends them.
 * Twilio fills the geographic ones when its lookup knows the numbers; here they are empty. */
static bool twilio_request(sim_t *s, og_hc_req_t *r, const inbound_msg_t *m, const char *id, const char *key)
{
    const char *sid = s->w->cfg->sms_account_sid;
    char to[26], from[26], segments[16];
    og_sms_info_t info;
    snprintf(to, sizeof(to), "+%s", m->to);
    snprintf(from, sizeof(from), "+%s", m->from);
    snprintf(segments, sizeof(segments), "%zu",
             og_sms_encode_info(m->text, strlen(m->text), &info) ? info.segments : (size_t)1);
    const sim_field_t fields[] = {
        {"ToCountry", ""},
        {"ToState", ""},
        {"SmsMessageSid", id},
        {"NumMedia", "0"},
        {"ToCity", ""},
        {"FromZip", ""},
        {"SmsSid", id},
        {"FromState", ""},
        {"SmsStatus", "received"},
        {"FromCity", ""},
        {"Body", m->text},
        {"FromCountry", ""},
        {"To", to},
        {"ToZip", ""},
        {"NumSegments", segments},
        {"MessageSid", id},
        {"AccountSid", sid != NULL && sid[0] != '\0' ? sid : INBOUND_TWILIO_ACCOUNT},
        {"From", from},
        {"ApiVersion", "2010-04-01"},
    };
    return sim_form_twilio(r, r->url, fields, sizeof(fields) / sizeof(fields[0]), key);
}

/* The provider message id: the request's, else one in the provider's own form. */
static void inbound_id(sim_t *s, const inbound_msg_t *m, char out[INBOUND_ID_MAX + 1])
{
    char hex[33];
    if (m->id != NULL) {
        snprintf(out, INBOUND_ID_MAX + 1, "%s", m->id);
    } else if (m->ch == SIM_CH_META) {
        sim_meta_wamid(s, m->from, true, out);
    } else if (m->ch == SIM_CH_QR) {
        sim_rand_chars(s, hex, 20, "0123456789ABCDEF");
        snprintf(out, INBOUND_ID_MAX + 1, "false_%s@c.us_%s", m->from, hex);
    } else {
        sim_rand_chars(s, hex, 32, "0123456789abcdef");
        snprintf(out, INBOUND_ID_MAX + 1, "SM%s", hex);
    }
}

static void on_posted(og_hc_req_t *r);

/* Where a WAHA message goes instead of the callback URL: the "message" webhook of the config of a
 * session created through the session API, with its hmac key (sessions.c). */
static bool session_hook(const sim_t *s, const inbound_msg_t *m, const char **url, const char **key)
{
    return m->ch == SIM_CH_QR && sim_waha_webhook(s, m->session, "message", url, key);
}

/* Builds the webhook of m into op->hreq: URL, body, signature. False when out of memory. */
static bool inbound_build(sim_t *s, inbound_op_t *op, const inbound_msg_t *m)
{
    const char *hook = NULL, *secret = NULL;
    char *url = NULL;
    if (session_hook(s, m, &hook, &secret)) {
        url = strdup(hook);
    } else {
        const char *base = sim_cb_base_url(s), *provider = sim_cb_provider_name(m->ch);
        const char *tail = m->ch == SIM_CH_SMS ? "/inbound" : "";
        size_t n = strlen(base) + strlen("/webhooks/") + strlen(provider) + strlen(tail) + 1;
        url = malloc(n);
        if (url != NULL)
            snprintf(url, n, "%s/webhooks/%s%s", base, provider, tail);
        secret = sim_cb_secret(s, m->ch);
    }
    if (url == NULL)
        return false;
    bool ok = sim_cb_request_init(&op->hreq, m->ch, url, on_posted);
    free(url);
    if (!ok)
        return false;
    inbound_id(s, m, op->id);
    const char *key = m->sig == SIG_BAD ? INBOUND_WRONG_KEY : m->sig == SIG_NONE ? NULL : secret;
    og_hc_req_t *r = &op->hreq;
    switch (m->ch) {
    case SIM_CH_META:
        return meta_request(s, r, m, op->id) && sim_sign_meta(r, key);
    case SIM_CH_QR:
        return waha_request(s, r, m, op->id) && sim_sign_waha(r, key);
    default:
        return twilio_request(s, r, m, op->id, key);
    }
}

/* ---- the control route -------------------------------------------------------------------- */

/* The first INBOUND_ANSWER_BODY_MAX bytes of the gateway's answer, cut at a character. */
static json_t *answer_body(const og_hc_req_t *r)
{
    if (r->http_status <= 0)
        return json_null();
    size_t n = r->resp != NULL ? r->resp_len : 0;
    if (n > INBOUND_ANSWER_BODY_MAX) {
        n = INBOUND_ANSWER_BODY_MAX;
        while (n > 0 && ((unsigned char)r->resp[n] & 0xc0) == 0x80)
            n--;
    }
    return sim_json_text(n > 0 ? r->resp : "", n);
}

static void on_posted(og_hc_req_t *r)
{
    inbound_op_t *op = container_of(r, inbound_op_t, hreq);
    sim_t *s = op->s;
    char id[2 * INBOUND_ID_MAX + 1];
    sim_cb_try_ended(s, op->ch, op->id, r, op->sent_at);
    og_log(&s->w->log, OG_LOG_INFO, "inbound posted",
           "\"provider\":\"%s\",\"messageId\":\"%s\",\"result\":\"%s\",\"status\":%ld",
           sim_cb_provider_name(op->ch), og_log_escape(id, sizeof(id), op->id, strlen(op->id)),
           og_hc_result_name(r->result), r->http_status);
    if (r->result == OG_HC_CANCELLED) {
        og_api_error(
            op->req, OG_E_UNAVAILABLE, NULL,
            "the simulator is draining: the inbound POST was cancelled (the gateway may have had it)");
    } else {
        json_t *data = json_pack("{s:s, s:o, s:s, s:o, s:s}", "id", op->id, "status",
                                 r->http_status > 0 ? json_integer(r->http_status) : json_null(), "result",
                                 og_hc_result_name(r->result), "body", answer_body(r), "url", r->url);
        og_api_reply(op->req, 200, "inbound posted", data, NULL, 0);
    }
    og_hc_req_clear(r);
    free(op);
}

/* POST /__sim/inbound {"provider", ...} (README.md: Inbound messages). */
void sim_inbound_post(og_http_req_t *req, const og_route_match_t *m, void *ctx)
{
    (void)m;
    sim_t *s = sim_of(ctx);
    og_err_t err = {0};
    inbound_msg_t msg = {0};
    inbound_op_t *op = NULL;
    og_hc_t *hc = NULL;
    json_t *body = og_json_decode_body(req, NULL, &err);
    const char *hook, *hook_key;
    if (body == NULL || !inbound_take(body, &msg, &err))
        goto failed;
    /* A session of the session API is linked to a number: the message was sent to it. */
    if (msg.ch == SIM_CH_QR && msg.me[0] == '\0')
        sim_waha_linked(s, msg.session, msg.me);
    if (sim_cb_base_url(s) == NULL && !session_hook(s, &msg, &hook, &hook_key)) {
        og_err_fail(&err, SIM_E_NO_CALLBACK_URL, NULL,
                    "no callback URL: start the simulator with --callback-url URL (the gateway's base URL)");
        goto failed;
    }
    hc = sim_cb_client(s);
    if (hc == NULL || s->w->draining) {
        og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "the simulator is draining");
        goto failed;
    }
    op = calloc(1, sizeof(*op));
    if (op == NULL || !inbound_build(s, op, &msg)) {
        og_err_fail(&err, OG_E_UNAVAILABLE, NULL, "out of memory");
        goto failed;
    }
    op->s = s;
    op->req = req;
    op->ch = msg.ch;
    op->sent_at = sim_now_ms();
    /* og_hc_start refuses only a closed client or a request in flight: neither can be here. */
    if (og_hc_start(hc, &op->hreq) != 0) {
        og_err_fail(&err, OG_E_INTERNAL_ERROR, NULL, "the HTTP client refused the inbound POST");
        goto failed;
    }
    sim_cb_try_started(s);
    json_decref(body);
    return;

failed:
    if (op != NULL)
        og_hc_req_clear(&op->hreq);
    free(op);
    json_decref(body);
    og_api_send_error(req, &err, NULL, NULL, NULL, 0);
}
