/*
 * Channel names and attempt error codes. See include/base/omnigate/channel.h.
 */
#include "omnigate/channel.h"

#include <string.h>

const char OG_ERR_PROVIDER_TIMEOUT[] = "provider_timeout";
const char OG_ERR_PROVIDER_UNREACHABLE[] = "provider_unreachable";
const char OG_ERR_PROVIDER_REJECTED[] = "provider_rejected";
const char OG_ERR_PROVIDER_ERROR[] = "provider_error";
const char OG_ERR_PROVIDER_RATE_LIMITED[] = "provider_rate_limited";
const char OG_ERR_NOT_CONFIGURED[] = "not_configured";
const char OG_ERR_PROVIDER_UNAVAILABLE[] = "provider_unavailable";
const char OG_ERR_RECIPIENT_OPTED_OUT[] = "recipient_opted_out";

const char *const og_attempt_outcomes[OG_ATTEMPT_OUTCOMES] = {
    "sent",
    OG_ERR_PROVIDER_TIMEOUT,
    OG_ERR_PROVIDER_UNREACHABLE,
    OG_ERR_PROVIDER_REJECTED,
    OG_ERR_PROVIDER_ERROR,
    OG_ERR_PROVIDER_RATE_LIMITED,
    OG_ERR_NOT_CONFIGURED,
    OG_ERR_PROVIDER_UNAVAILABLE,
};

static const char *const channel_names[OG_CH__COUNT] = {
    [OG_CH_WHATSAPP_QR] = "whatsapp_qr",
    [OG_CH_WHATSAPP_META] = "whatsapp_meta",
    [OG_CH_SMS] = "sms",
};

const char *og_channel_name(og_channel_t ch)
{
    return (unsigned)ch < OG_CH__COUNT ? channel_names[ch] : "?";
}

const char *og_channel_provider(og_channel_t ch)
{
    static const char *const names[OG_CH__COUNT] = {
        [OG_CH_WHATSAPP_QR] = "waha",
        [OG_CH_WHATSAPP_META] = "meta",
        [OG_CH_SMS] = "twilio",
    };
    return (unsigned)ch < OG_CH__COUNT ? names[ch] : "?";
}

bool og_channel_parse(const char *name, og_channel_t *out)
{
    for (int i = 0; i < OG_CH__COUNT; i++) {
        if (name != NULL && strcmp(name, channel_names[i]) == 0) {
            *out = (og_channel_t)i;
            return true;
        }
    }
    return false;
}

int og_channel_index(const og_channel_t *list, int n, og_channel_t ch)
{
    for (int i = 0; i < n; i++)
        if (list[i] == ch)
            return i;
    return -1;
}
