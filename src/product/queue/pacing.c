/*
 * Pacing rates (API.md §19). The settings module reads the tenant's value in its own unit
 * (og_settings_sender_rate); this one supplies the configured default when there is none and
 * turns whatsapp_qr's per-minute rate into the per-second rate every caller compares against.
 */
#include "omnigate/queue/pacing.h"

#include "omnigate/providers/provider.h"
#include "omnigate/tenants/settings.h"

int og_pacing_cost(og_channel_t ch, size_t segments)
{
    return ch == OG_CH_SMS && segments > 1 ? (int)segments : 1;
}

const char *og_pacing_sender(og_channel_t ch, const char *sms_sender, const char *qr_session,
                             const char *phone_number_id)
{
    return ch == OG_CH_SMS ? sms_sender
           : ch == OG_CH_WHATSAPP_QR
               ? (qr_session != NULL && qr_session[0] != '\0' ? qr_session : OG_WAHA_DEFAULT_SESSION)
               : phone_number_id;
}

double og_pacing_rate(const og_config_t *cfg, const json_t *settings, og_channel_t ch, const char *from)
{
    double set = og_settings_sender_rate(settings, og_channel_name(ch), from);
    switch (ch) {
    case OG_CH_WHATSAPP_META:
        return set > 0 ? set : cfg->meta_default_mps;
    case OG_CH_SMS:
        return set > 0 ? set : cfg->sms_default_mps;
    case OG_CH_WHATSAPP_QR:
        return (set > 0 ? set : cfg->qr_default_per_minute) / 60.0;
    case OG_CH__COUNT:
        break;
    }
    return 0;
}
