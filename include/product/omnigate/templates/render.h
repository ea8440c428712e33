/*
 * A send's WhatsApp template (API.md §18), checked against its catalogue entry and made into
 * what the channels send: Meta's `template` object (name, language, body and button
 * components) and the body with its parameters filled in, for the channels that take text.
 * Also Meta's template as the catalogue keeps it, from the listing Meta answers. Pure
 * functions on jansson values: no database, no HTTP. Responsible for the rules of a template's
 * parameters; not for finding the template (catalogue.h) nor for sending (providers/meta.c).
 */
#ifndef OMNIGATE_TEMPLATES_RENDER_H
#define OMNIGATE_TEMPLATES_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "omnigate/error.h"

#define OG_TPL_PARAM_MAX   1024 /* characters of one parameter value */
#define OG_TPL_PARAMS_MAX  100  /* parameters of one template body */
#define OG_TPL_BUTTONS_MAX 10   /* buttons of one template (Meta's limit) */

/* The one status a template is sent in (Meta's spelling); every other one refuses the send. */
#define OG_TPL_APPROVED "APPROVED"

/* The request's `template` object, checked for form only (names, types, sizes): false with
 * validation_failed or unknown_field naming "template.<field>". */
bool og_tpl_request_valid(const json_t *tpl, og_err_t *err);

/* What a checked template send sends. Both strings malloc'd; og_tpl_out_clear frees them. */
typedef struct og_tpl_out {
    char *meta;     /* Meta's `template` object, JSON text */
    char *rendered; /* the catalogue body with the parameters filled in (UTF-8) */
} og_tpl_out_t;

void og_tpl_out_clear(og_tpl_out_t *o);

/* Checks a form-valid request template `tpl` against its catalogue entry `item` (the item of
 * og_template_item, sql/016; NULL: not in the catalogue) and fills `out`. False with
 * template_not_found (field template.name), template_not_approved (template.name) or
 * template_parameters_mismatch (template.parameters or template.buttons) in `err`, or
 * unavailable when out of memory. `waba_id` only names the WABA in messages. */
bool og_tpl_apply(const json_t *tpl, const json_t *item, const char *waba_id, og_tpl_out_t *out,
                  og_err_t *err);

/* Meta's `template` object that carries one text in a one-parameter template: `item` must be
 * APPROVED with exactly one body parameter (else false with the error, field "text"), and the
 * text is that parameter: a free text wrapped for API.md §18's outsideWindow: template, or an
 * OTP's code in the authentication template. With `in_buttons` the text is also the parameter
 * of each of its buttons that takes one (the code in Meta's copy-code button). out->rendered is
 * the body with the text in it. */
bool og_tpl_wrap(const json_t *item, const char *name, const char *language, const char *text,
                 bool in_buttons, og_tpl_out_t *out, og_err_t *err);

/* One template of Meta's listing (GET /{wabaId}/message_templates: name, language, status,
 * category, parameter_format, components) as the catalogue keeps it: {name, language, status,
 * category (lower case), parameter_format (positional|named), parameters (the body's
 * placeholders: "1","2", ... or the names in order of appearance), body, buttons [{index, type,
 * text, url?, parameter}], meta_id}. NULL when it has no name or language (or out of memory). */
json_t *og_tpl_from_meta(const json_t *meta);

/* `body` with each {{key}} placeholder (a key of letters, digits and _, spaces around it
 * ignored: a template body's rule) whose key `values` (an object of key -> string) has replaced
 * by its value. Others are kept as written; with `missing`, the first of them instead makes
 * this return NULL with its key in `missing` (a batch's variables, API.md §20). malloc'd; NULL
 * with `missing` left untouched when out of memory. */
char *og_tpl_fill(const char *body, const json_t *values, char *missing, size_t missing_size);

/* The body's placeholders: for `named`, each {{name}} once in order of appearance; else each
 * {{n}} once, in increasing order, as strings. A new array, or NULL when out of memory. */
json_t *og_tpl_placeholders(const char *body, bool named);

#endif
