/*
 * Unit tests of template checks and rendering (src/product/templates/render.c, API.md §18):
 * the request's form, the checks against a catalogue entry, Meta's template object and the
 * body rendered for the other channels, and the catalogue's reading of Meta's listing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "omnigate/app/errors.h"
#include "omnigate/templates/render.h"

/* A catalogue entry as og_template_item (sql/016) shows it. */
static json_t *entry(const char *status, const char *format, const char *params, const char *body,
                     const char *buttons)
{
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"wabaId\":\"1001\",\"name\":\"order\",\"language\":\"en_US\",\"status\":\"%s\","
             "\"category\":\"utility\",\"parameterFormat\":\"%s\",\"parameters\":%s,\"body\":\"%s\","
             "\"buttons\":%s}",
             status, format, params, body, buttons);
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

static json_t *req(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    return j;
}

/* Positional parameters fill {{1}} and {{2}} in order; Meta gets a body component of text
 * parameters, the language with its deterministic policy, and the URL button's parameter. */
static void test_positional_with_url_button(void **state)
{
    json_t *item = entry("APPROVED", "positional", "[\"1\",\"2\"]", "Hi {{1}}, order {{2}} ships",
                         "[{\"index\":0,\"type\":\"URL\",\"text\":\"Track\",\"url\":\"https://t/{{1}}\","
                         "\"parameter\":true}]");
    json_t *tpl = req("{\"name\":\"order\",\"language\":\"en_US\",\"parameters\":[\"Ana\",\"A-17\"],"
                      "\"buttons\":[{\"index\":0,\"subType\":\"url\",\"parameter\":\"A17\"}]}");
    og_err_t err = {0};
    og_tpl_out_t out;
    assert_true(og_tpl_request_valid(tpl, &err));
    assert_true(og_tpl_apply(tpl, item, "1001", &out, &err));
    assert_string_equal(out.rendered, "Hi Ana, order A-17 ships");
    assert_string_equal(
        out.meta, "{\"name\":\"order\",\"language\":{\"policy\":\"deterministic\",\"code\":\"en_US\"},"
                  "\"components\":[{\"type\":\"body\",\"parameters\":[{\"type\":\"text\",\"text\":\"Ana\"},"
                  "{\"type\":\"text\",\"text\":\"A-17\"}]},{\"type\":\"button\",\"sub_type\":\"url\","
                  "\"index\":\"0\",\"parameters\":[{\"type\":\"text\",\"text\":\"A17\"}]}]}");
    og_tpl_out_clear(&out);
    json_decref(item);
    json_decref(tpl);
}

/* Named parameters carry parameter_name, in the template's order whatever the request's. */
static void test_named(void **state)
{
    json_t *item =
        entry("APPROVED", "named", "[\"first_name\",\"order\"]", "Hi {{first_name}}: {{order}}", "[]");
    json_t *tpl = req("{\"name\":\"order\",\"language\":\"en_US\",\"parameters\":{\"order\":\"B-2\","
                      "\"first_name\":\"Budi\"}}");
    og_err_t err = {0};
    og_tpl_out_t out;
    assert_true(og_tpl_apply(tpl, item, "1001", &out, &err));
    assert_string_equal(out.rendered, "Hi Budi: B-2");
    assert_non_null(strstr(out.meta,
                           "{\"type\":\"text\",\"parameter_name\":\"first_name\",\"text\":\"Budi\"},"
                           "{\"type\":\"text\",\"parameter_name\":\"order\",\"text\":\"B-2\"}"));
    og_tpl_out_clear(&out);
    json_decref(item);
    json_decref(tpl);
}

/* Each way a send can miss its template answers its own code and field. */
static void test_refusals(void **state)
{
    json_t *item = entry("APPROVED", "positional", "[\"1\"]", "Code {{1}}",
                         "[{\"index\":0,\"type\":\"OTP\",\"text\":\"Copy\",\"parameter\":true}]");
    json_t *paused = entry("PAUSED", "positional", "[\"1\"]", "Code {{1}}", "[]");
    og_tpl_out_t out;
    og_err_t err = {0};
    json_t *one = req("{\"name\":\"order\",\"language\":\"en_US\",\"parameters\":[\"1\"]}");
    assert_false(og_tpl_apply(one, NULL, "1001", &out, &err));
    assert_ptr_equal(err.code, OG_E_TEMPLATE_NOT_FOUND);
    assert_string_equal(err.field, "template.name");
    assert_false(og_tpl_apply(one, paused, "1001", &out, &err));
    assert_ptr_equal(err.code, OG_E_TEMPLATE_NOT_APPROVED);
    /* The OTP button wants its parameter. */
    assert_false(og_tpl_apply(one, item, "1001", &out, &err));
    assert_ptr_equal(err.code, OG_E_TEMPLATE_PARAMETERS_MISMATCH);
    assert_string_equal(err.field, "template.buttons");
    json_t *two = req("{\"name\":\"order\",\"language\":\"en_US\",\"parameters\":[\"1\",\"2\"],"
                      "\"buttons\":[{\"index\":0,\"subType\":\"url\",\"parameter\":\"1\"}]}");
    assert_false(og_tpl_apply(two, item, "1001", &out, &err));
    assert_ptr_equal(err.code, OG_E_TEMPLATE_PARAMETERS_MISMATCH);
    assert_string_equal(err.field, "template.parameters");
    json_t *qr = req("{\"name\":\"order\",\"language\":\"en_US\",\"parameters\":[\"1\"],"
                     "\"buttons\":[{\"index\":0,\"subType\":\"quick_reply\",\"parameter\":\"1\"}]}");
    assert_false(og_tpl_apply(qr, item, "1001", &out, &err));
    assert_string_equal(err.field, "template.buttons");
    json_decref(item);
    json_decref(paused);
    json_decref(one);
    json_decref(two);
    json_decref(qr);
}

/* The request's form: unknown keys, bad names and languages, non-string values. */
static void test_request_form(void **state)
{
    static const struct {
        const char *json;
        const char *field;
    } bad[] = {
        {"{\"name\":\"Order\",\"language\":\"en\"}", "template.name"},
        {"{\"name\":\"order\",\"language\":\"e\"}", "template.language"},
        {"{\"name\":\"order\",\"language\":\"en\",\"parameters\":[1]}", "template.parameters"},
        {"{\"name\":\"order\",\"language\":\"en\",\"parameters\":[\"\"]}", "template.parameters"},
        {"{\"name\":\"order\",\"language\":\"en\",\"extra\":1}", "template.extra"},
        {"{\"name\":\"order\",\"language\":\"en\",\"buttons\":[{\"index\":10,\"subType\":\"url\","
         "\"parameter\":\"x\"}]}",
         "template.buttons[0]"},
        {"{\"name\":\"order\",\"language\":\"en\",\"buttons\":[{\"index\":0,\"subType\":\"call\","
         "\"parameter\":\"x\"}]}",
         "template.buttons[0]"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *t = req(bad[i].json);
        og_err_t err = {0};
        assert_false(og_tpl_request_valid(t, &err));
        assert_string_equal(err.field, bad[i].field);
        json_decref(t);
    }
}

/* outsideWindow: template puts the text in a one-parameter template, and refuses another. */
static void test_wrap(void **state)
{
    json_t *one = entry("APPROVED", "positional", "[\"1\"]", "Message: {{1}}", "[]");
    json_t *two = entry("APPROVED", "positional", "[\"1\",\"2\"]", "{{1}} {{2}}", "[]");
    og_tpl_out_t out;
    og_err_t err = {0};
    assert_true(og_tpl_wrap(one, "relay", "en", "Your parcel is here", false, &out, &err));
    assert_string_equal(out.rendered, "Message: Your parcel is here");
    assert_non_null(strstr(out.meta, "\"text\":\"Your parcel is here\""));
    og_tpl_out_clear(&out);
    assert_false(og_tpl_wrap(two, "relay", "en", "x", false, &out, &err));
    assert_ptr_equal(err.code, OG_E_TEMPLATE_PARAMETERS_MISMATCH);
    /* An OTP's code: the body's one parameter and its copy-code button's. */
    json_t *otp = entry("APPROVED", "positional", "[\"1\"]", "*{{1}}* is your code",
                        "[{\"index\":0,\"type\":\"OTP\",\"text\":\"Copy\",\"parameter\":true}]");
    assert_true(og_tpl_wrap(otp, "auth", "en", "123456", true, &out, &err));
    assert_non_null(strstr(out.meta, "{\"type\":\"button\",\"sub_type\":\"url\",\"index\":\"0\","
                                     "\"parameters\":[{\"type\":\"text\",\"text\":\"123456\"}]}"));
    og_tpl_out_clear(&out);
    json_decref(otp);
    json_decref(one);
    json_decref(two);
}

/* Meta's listing becomes a catalogue row: body placeholders, buttons that need a parameter
 * (a URL with a placeholder, an OTP button), lower-case category, the format. */
static void test_from_meta(void **state)
{
    json_t *m = req(
        "{\"name\":\"auth\",\"language\":\"en_US\",\"status\":\"APPROVED\",\"category\":\"AUTHENTICATION\","
        "\"id\":\"42\",\"components\":[{\"type\":\"BODY\",\"text\":\"*{{1}}* is your code. {{1}}\"},"
        "{\"type\":\"BUTTONS\",\"buttons\":[{\"type\":\"OTP\",\"otp_type\":\"COPY_CODE\",\"text\":\"Copy\"},"
        "{\"type\":\"URL\",\"text\":\"Site\",\"url\":\"https://x\"}]}]}");
    json_t *row = og_tpl_from_meta(m);
    assert_non_null(row);
    char *text = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(
        text, "{\"body\":\"*{{1}}* is your code. {{1}}\",\"buttons\":[{\"index\":0,\"parameter\":true,"
              "\"text\":\"Copy\",\"type\":\"OTP\"},{\"index\":1,\"parameter\":false,\"text\":\"Site\","
              "\"type\":\"URL\",\"url\":\"https://x\"}],\"category\":\"authentication\",\"language\":"
              "\"en_US\",\"meta_id\":\"42\",\"name\":\"auth\",\"parameter_format\":\"positional\","
              "\"parameters\":[\"1\"],\"status\":\"APPROVED\"}");
    free(text);
    json_decref(row);
    json_decref(m);
    json_t *noname = req("{\"language\":\"en\"}");
    assert_null(og_tpl_from_meta(noname));
    json_decref(noname);
    json_t *p = og_tpl_placeholders("{{2}} {{ 1 }} {{x y}} {{3", false);
    text = json_dumps(p, JSON_COMPACT);
    assert_string_equal(text, "[\"1\",\"2\"]");
    free(text);
    json_decref(p);
}

/* og_tpl_fill: each {{key}} with a value is replaced (spaces inside the braces ignored, a key
 * used twice filled twice, a value's own braces left alone); without `missing` the others stay
 * as written, with it the first key without a value is named and nothing is returned. */
static void test_fill(void **state)
{
    (void)state;
    json_t *v = req("{\"name\":\"Ana\",\"order\":\"{{name}}-17\",\"n\":\"\"}");
    char missing[64] = "";
    char *t = og_tpl_fill("Hi {{name}}, order {{ order }} for {{name}}{{n}}.", v, missing, sizeof(missing));
    assert_non_null(t);
    assert_string_equal(t, "Hi Ana, order {{name}}-17 for Ana.");
    free(t);
    t = og_tpl_fill("{{x y}} {{-}} {{ {{name}}", v, missing, sizeof(missing));
    assert_non_null(t);
    assert_string_equal(t, "{{x y}} {{-}} {{ Ana");
    free(t);
    t = og_tpl_fill("Hi {{name}}, {{city}} and {{zip}}", v, NULL, 0);
    assert_string_equal(t, "Hi Ana, {{city}} and {{zip}}");
    free(t);
    assert_null(og_tpl_fill("Hi {{name}}, {{city}} and {{zip}}", v, missing, sizeof(missing)));
    assert_string_equal(missing, "city");
    t = og_tpl_fill("", v, missing, sizeof(missing));
    assert_string_equal(t, "");
    free(t);
    json_decref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill),         cmocka_unit_test(test_positional_with_url_button),
        cmocka_unit_test(test_named),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_request_form), cmocka_unit_test(test_wrap),
        cmocka_unit_test(test_from_meta),
    };
    return cmocka_run_group_tests_name("tpl_render", tests, NULL, NULL);
}
