/*
 * The provider webhook parsers and Twilio's signature (src/product/webhooks_in.c): what each
 * wire format becomes, what is left out, and that a malformed batch is refused whole.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/app/errors.h"
#include "omnigate/callbacks/webhooks_in.h"

static const char *field(json_t *arr, size_t i, const char *name)
{
    return json_string_value(json_object_get(json_array_get(arr, i), name));
}

/* Meta: every status of every change of every entry, played as read, failed with its code,
 * title and deliveryError; unknown statuses and other fields left out. */
static void test_meta(void **state)
{
    const char body[] =
        "{\"object\":\"whatsapp_business_account\",\"entry\":[{\"id\":\"1\",\"changes\":["
        "{\"field\":\"messages\",\"value\":{\"statuses\":["
        "{\"id\":\"wamid.A\",\"status\":\"delivered\",\"timestamp\":\"1700000000\"},"
        "{\"id\":\"wamid.B\",\"status\":\"played\",\"timestamp\":1700000001},"
        "{\"id\":\"wamid.C\",\"status\":\"deleted\",\"timestamp\":\"1700000002\"},"
        "{\"id\":\"wamid.D\",\"status\":\"failed\",\"timestamp\":\"1700000003\",\"errors\":[{\"code\":131026,"
        "\"title\":\"Message undeliverable\"}]}],\"metadata\":{\"phone_number_id\":\"77\"},"
        "\"messages\":[{\"id\":\"in\",\"from\":\"15550001111\",\"timestamp\":\"1\",\"type\":\"text\"}]}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"statuses\":[{\"bad\":1}]}}]}]}";
    og_err_t err = {0};
    json_t *a = og_webhook_parse_meta(body, strlen(body), 5, &err);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 3);
    assert_string_equal(field(a, 0, "pid"), "wamid.A");
    assert_string_equal(field(a, 0, "status"), "delivered");
    assert_string_equal(field(a, 0, "channel"), "whatsapp_meta");
    assert_true(json_real_value(json_object_get(json_array_get(a, 0), "at")) == 1700000000.0);
    assert_null(json_object_get(json_array_get(a, 0), "error"));
    assert_string_equal(field(a, 1, "status"), "read");
    assert_string_equal(field(a, 2, "status"), "failed");
    assert_string_equal(field(a, 2, "code"), "131026");
    assert_string_equal(field(a, 2, "error"), "not_on_whatsapp");
    assert_string_equal(field(a, 2, "message"), "Message undeliverable");
    json_decref(a);
}

/* Meta's template status changes: entry[].id is the WABA, REINSTATED is APPROVED, the last
 * change of a template in the body wins, and incomplete changes, unknown events and names no
 * catalogue entry can have are left out without refusing the statuses beside them. */
static void test_meta_templates(void **state)
{
    const char body[] =
        "{\"object\":\"whatsapp_business_account\",\"entry\":["
        "{\"id\":\"111\",\"changes\":["
        "{\"field\":\"message_template_status_update\",\"value\":{\"event\":\"PAUSED\","
        "\"message_template_id\":9,\"message_template_name\":\"order_update\","
        "\"message_template_language\":\"en_US\",\"reason\":null}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"event\":\"REJECTED\","
        "\"message_template_name\":\"promo\",\"message_template_language\":\"en\"}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"event\":\"REINSTATED\","
        "\"message_template_name\":\"order_update\",\"message_template_language\":\"en_US\"}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"event\":\"SOMETHING_NEW\","
        "\"message_template_name\":\"x\",\"message_template_language\":\"en\"}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"event\":\"APPROVED\","
        "\"message_template_name\":\"Bad Name\",\"message_template_language\":\"en\"}},"
        "{\"field\":\"message_template_status_update\",\"value\":{\"statuses\":[{\"bad\":1}]}},"
        "{\"field\":\"messages\",\"value\":{\"statuses\":["
        "{\"id\":\"wamid.A\",\"status\":\"delivered\",\"timestamp\":\"1700000000\"}]}}]},"
        "{\"id\":\"not-a-waba\",\"changes\":[{\"field\":\"message_template_status_update\",\"value\":"
        "{\"event\":\"APPROVED\",\"message_template_name\":\"y\",\"message_template_language\":\"en\"}}]},"
        "{\"id\":\"222\",\"changes\":[{\"field\":\"message_template_status_update\",\"value\":"
        "{\"event\":\"FLAGGED\",\"message_template_name\":\"order_update\","
        "\"message_template_language\":\"en_US\"}}]}]}";
    og_err_t err = {0};
    json_t *templates = NULL;
    json_t *a = og_webhook_parse_meta_all(body, strlen(body), 5, &templates, NULL, &err);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 1);
    assert_string_equal(field(a, 0, "pid"), "wamid.A");
    assert_non_null(templates);
    assert_int_equal(json_array_size(templates), 3);
    assert_string_equal(field(templates, 0, "waba"), "111");
    assert_string_equal(field(templates, 0, "name"), "promo");
    assert_string_equal(field(templates, 0, "language"), "en");
    assert_string_equal(field(templates, 0, "status"), "REJECTED");
    assert_string_equal(field(templates, 1, "waba"), "111");
    assert_string_equal(field(templates, 1, "name"), "order_update");
    assert_string_equal(field(templates, 1, "language"), "en_US");
    assert_string_equal(field(templates, 1, "status"), "APPROVED");
    assert_string_equal(field(templates, 2, "waba"), "222");
    assert_string_equal(field(templates, 2, "status"), "FLAGGED");
    json_decref(templates);
    json_decref(a);

    /* The statuses alone (og_webhook_parse_meta) are the same. */
    a = og_webhook_parse_meta(body, strlen(body), 5, &err);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 1);
    json_decref(a);
}

/* A batch with one bad status is refused whole, naming the problem. */
static void test_meta_refused_whole(void **state)
{
    const char *bad[] = {
        "not json",
        "[]",
        "{}",
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"statuses\":["
        "{\"id\":\"wamid.A\",\"status\":\"read\",\"timestamp\":\"1\"},{\"status\":\"read\",\"timestamp\":"
        "\"1\"}]}}]}]}",
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"statuses\":["
        "{\"id\":\"wamid.A\",\"status\":\"read\",\"timestamp\":\"-1\"}]}}]}]}",
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"statuses\":{}}}]}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        og_err_t err = {0};
        assert_null(og_webhook_parse_meta(bad[i], strlen(bad[i]), 5, &err));
        assert_non_null(err.code);
    }
}

/* WAHA: acks map by number, the envelope's milliseconds become seconds, PENDING and other
 * events are left out. */
static void test_waha(void **state)
{
    const char ack[] =
        "{\"event\":\"message.ack\",\"timestamp\":1700000000500,\"payload\":{\"id\":\"true_1@c.us_X\","
        "\"ack\":-1,\"ackName\":\"ERROR\"}}";
    og_err_t err = {0};
    json_t *a = og_webhook_parse_waha(ack, strlen(ack), 5, &err);
    assert_int_equal(json_array_size(a), 1);
    assert_string_equal(field(a, 0, "status"), "failed");
    assert_string_equal(field(a, 0, "channel"), "whatsapp_qr");
    assert_string_equal(field(a, 0, "error"), "provider_error");
    assert_true(json_real_value(json_object_get(json_array_get(a, 0), "at")) == 1700000000.5);
    json_decref(a);
    const char pending[] = "{\"event\":\"message.ack\",\"payload\":{\"id\":\"x\",\"ack\":0}}";
    a = og_webhook_parse_waha(pending, strlen(pending), 5, &err);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    const char other[] = "{\"event\":\"message\",\"payload\":{\"body\":\"hi\"}}";
    a = og_webhook_parse_waha(other, strlen(other), 5, &err);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    const char bad[] = "{\"event\":\"message.ack\",\"payload\":{\"id\":\"x\",\"ack\":\"2\"}}";
    assert_null(og_webhook_parse_waha(bad, strlen(bad), 5, &err));
}

/* Twilio: MessageSid/MessageStatus (or the Sms* twins), the receipt time, ErrorCode mapped;
 * queued is left out; no sid is refused. */
static void test_twilio(void **state)
{
    const char body[] =
        "SmsSid=SM1&MessageStatus=undelivered&ErrorCode=30005&To=%2B6281&ErrorMessage=Unknown+handset";
    og_err_t err = {0};
    json_t *a = og_webhook_parse_twilio(body, strlen(body), 42, &err);
    assert_int_equal(json_array_size(a), 1);
    assert_string_equal(field(a, 0, "pid"), "SM1");
    assert_string_equal(field(a, 0, "status"), "undelivered");
    assert_string_equal(field(a, 0, "error"), "carrier_rejected");
    assert_string_equal(field(a, 0, "message"), "Unknown handset");
    assert_true(json_real_value(json_object_get(json_array_get(a, 0), "at")) == 42.0);
    json_decref(a);
    const char queued[] = "MessageSid=SM1&MessageStatus=queued";
    a = og_webhook_parse_twilio(queued, strlen(queued), 42, &err);
    assert_int_equal(json_array_size(a), 0);
    json_decref(a);
    const char nosid[] = "MessageStatus=delivered";
    assert_null(og_webhook_parse_twilio(nosid, strlen(nosid), 42, &err));
    assert_ptr_equal(err.code, OG_E_INVALID_PAYLOAD);
}

/* The signature covers the URL and the decoded fields in name order. */
static void test_twilio_signature(void **state)
{
    /* Twilio's documented example, sent as a form in another order and percent-encoded. */
    const char body[] =
        "To=%2B18005551212&Digits=1234&From=%2B12349013030&Caller=%2B12349013030&CallSid=CA1234567890ABCDE";
    const char url[] = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const char sig[] = "0/KCTR6DLpKmkAf8muzZqo1nDgQ=";
    assert_true(og_webhook_twilio_signed("12345", url, body, strlen(body), sig, strlen(sig)));
    assert_false(og_webhook_twilio_signed("12345", "https://mycompany.com/myapp.php?foo=1&bar=3", body,
                                          strlen(body), sig, strlen(sig)));
    const char changed[] =
        "To=%2B18005551213&Digits=1234&From=%2B12349013030&Caller=%2B12349013030&CallSid=CA1234567890ABCDE";
    assert_false(og_webhook_twilio_signed("12345", url, changed, strlen(changed), sig, strlen(sig)));
    assert_false(og_webhook_twilio_signed("12345", url, "a=%zz", 5, sig, strlen(sig)));
}

/* Inbound messages (API.md §21): Meta's value.messages[] with their texts by type, routed by the
 * phone number id; WAHA's message event routed by session and me, messages not from a phone
 * number left out and counted; Twilio's incoming SMS routed by To; a message without its id or
 * sender refuses the body whole. */
static void test_inbound(void **state)
{
    const char meta[] =
        "{\"entry\":[{\"id\":\"1\",\"changes\":[{\"field\":\"messages\",\"value\":{"
        "\"metadata\":{\"display_phone_number\":\"15550000000\",\"phone_number_id\":\"106540352242922\"},"
        "\"messages\":["
        "{\"from\":\"4915112345678\",\"id\":\"wamid.T\",\"timestamp\":\"1700000000\",\"type\":\"text\","
        "\"text\":{\"body\":\" stop \"}},"
        "{\"from\":\"4915112345678\",\"id\":\"wamid.B\",\"timestamp\":\"1700000001\",\"type\":\"button\","
        "\"button\":{\"text\":\"Yes\",\"payload\":\"y\"}},"
        "{\"from\":\"4915112345678\",\"id\":\"wamid.I\",\"timestamp\":\"1700000002\",\"type\":"
        "\"interactive\","
        "\"interactive\":{\"type\":\"button_reply\",\"button_reply\":{\"id\":\"b\",\"title\":\"Later\"}}},"
        "{\"from\":\"4915112345678\",\"id\":\"wamid.P\",\"timestamp\":\"1700000003\",\"type\":\"image\","
        "\"image\":{\"id\":\"m\",\"mime_type\":\"image/jpeg\"}}]}}]}]}";
    og_err_t err = {0};
    json_t *templates = NULL, *in = NULL;
    json_t *a = og_webhook_parse_meta_all(meta, strlen(meta), 5, &templates, &in, &err);
    assert_non_null(a);
    assert_int_equal(json_array_size(a), 0);
    assert_int_equal(json_array_size(in), 4);
    assert_string_equal(field(in, 0, "channel"), "whatsapp_meta");
    assert_string_equal(field(in, 0, "pid"), "wamid.T");
    assert_string_equal(field(in, 0, "from"), "+4915112345678");
    assert_string_equal(field(in, 0, "route"), "106540352242922");
    assert_string_equal(field(in, 0, "phoneNumberId"), "106540352242922");
    assert_string_equal(field(in, 0, "type"), "text");
    assert_string_equal(field(in, 0, "text"), " stop ");
    assert_true(json_real_value(json_object_get(json_array_get(in, 0), "at")) == 1700000000.0);
    assert_string_equal(field(in, 1, "text"), "Yes");
    assert_string_equal(field(in, 2, "text"), "Later");
    assert_string_equal(field(in, 3, "type"), "image");
    assert_null(json_object_get(json_array_get(in, 3), "text"));
    json_decref(a);
    json_decref(templates);
    json_decref(in);

    const char *const bad_meta[] = {
        /* no phone number id */
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"messages\":[{\"from\":"
        "\"4915112345678\","
        "\"id\":\"w\",\"timestamp\":\"1\",\"type\":\"text\"}]}}]}]}",
        /* no sender */
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"metadata\":{\"phone_number_id\":"
        "\"1\"},"
        "\"messages\":[{\"id\":\"w\",\"timestamp\":\"1\",\"type\":\"text\"}]}}]}]}",
        /* a sender that is no phone number */
        "{\"entry\":[{\"changes\":[{\"field\":\"messages\",\"value\":{\"metadata\":{\"phone_number_id\":"
        "\"1\"},"
        "\"messages\":[{\"from\":\"12ab\",\"id\":\"w\",\"timestamp\":\"1\",\"type\":\"text\"}]}}]}]}",
    };
    for (size_t i = 0; i < sizeof(bad_meta) / sizeof(bad_meta[0]); i++) {
        assert_null(og_webhook_parse_meta_all(bad_meta[i], strlen(bad_meta[i]), 5, &templates, &in, &err));
        assert_ptr_equal(err.code, OG_E_INVALID_PAYLOAD);
    }

    const char waha[] =
        "{\"event\":\"message\",\"session\":\"default\",\"me\":{\"id\":\"4930123456@c.us\"},"
        "\"payload\":{\"id\":\"false_4915112345678@c.us_AAA\",\"timestamp\":1700000000,"
        "\"from\":\"4915112345678@c.us\",\"fromMe\":false,\"body\":\"Hello\",\"hasMedia\":false}}";
    int ignored = -1;
    a = og_webhook_parse_waha_all(waha, strlen(waha), 5, &in, &ignored, NULL, &err);
    assert_non_null(a);
    assert_int_equal(ignored, 0);
    assert_int_equal(json_array_size(in), 1);
    assert_string_equal(field(in, 0, "channel"), "whatsapp_qr");
    assert_string_equal(field(in, 0, "from"), "+4915112345678");
    assert_string_equal(field(in, 0, "route"), "default");
    assert_string_equal(field(in, 0, "session"), "default");
    assert_string_equal(field(in, 0, "number"), "4930123456");
    assert_string_equal(field(in, 0, "text"), "Hello");
    json_decref(a);
    json_decref(in);
    const char group[] = "{\"event\":\"message\",\"session\":\"default\",\"payload\":{\"id\":\"g\","
                         "\"from\":\"12036302@g.us\",\"fromMe\":false,\"body\":\"hi\"}}";
    a = og_webhook_parse_waha_all(group, strlen(group), 5, &in, &ignored, NULL, &err);
    assert_int_equal(ignored, 1);
    assert_int_equal(json_array_size(in), 0);
    json_decref(a);
    json_decref(in);

    const char tw[] =
        "ToCountry=US&SmsMessageSid=SM9&NumMedia=0&SmsSid=SM9&SmsStatus=received&Body=STOP"
        "&To=%2B15550001111&MessageSid=SM9&AccountSid=AC1&From=%2B15557654321&ApiVersion=2010-04-01";
    in = og_webhook_parse_twilio_inbound(tw, strlen(tw), 42, &ignored, &err);
    assert_int_equal(ignored, 0);
    assert_int_equal(json_array_size(in), 1);
    assert_string_equal(field(in, 0, "channel"), "sms");
    assert_string_equal(field(in, 0, "pid"), "SM9");
    assert_string_equal(field(in, 0, "from"), "+15557654321");
    assert_string_equal(field(in, 0, "route"), "+15550001111");
    assert_string_equal(field(in, 0, "text"), "STOP");
    assert_true(json_real_value(json_object_get(json_array_get(in, 0), "at")) == 42.0);
    json_decref(in);
    const char short_code[] = "MessageSid=SM8&To=%2B15550001111&From=72345&Body=x";
    in = og_webhook_parse_twilio_inbound(short_code, strlen(short_code), 42, &ignored, &err);
    assert_int_equal(json_array_size(in), 0);
    assert_int_equal(ignored, 1);
    json_decref(in);
    const char no_from[] = "MessageSid=SM9&To=%2B15550001111&Body=x";
    assert_null(og_webhook_parse_twilio_inbound(no_from, strlen(no_from), 42, &ignored, &err));
    assert_ptr_equal(err.code, OG_E_INVALID_PAYLOAD);
}

static void test_delivery_errors(void **state)
{
    assert_string_equal(og_webhook_delivery_error("whatsapp_meta", "131047"), "outside_window");
    assert_string_equal(og_webhook_delivery_error("whatsapp_meta", "131050"), "recipient_opted_out");
    assert_string_equal(og_webhook_delivery_error("whatsapp_meta", NULL), "provider_error");
    assert_string_equal(og_webhook_delivery_error("sms", "21610"), "recipient_opted_out");
    assert_string_equal(og_webhook_delivery_error("sms", "30002"), "provider_error");
    assert_string_equal(og_webhook_delivery_error("sms", "30003"), "carrier_rejected");
    assert_string_equal(og_webhook_delivery_error("whatsapp_qr", "131026"), "provider_error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_meta_templates),
        cmocka_unit_test(test_meta_refused_whole),
        cmocka_unit_test(test_waha),
        cmocka_unit_test(test_twilio),
        cmocka_unit_test(test_twilio_signature),
        cmocka_unit_test(test_inbound),
        cmocka_unit_test(test_delivery_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
