/*
 * The time budget of a send. See include/product/omnigate/messaging/budget.h.
 */
#include "omnigate/messaging/budget.h"

uint32_t og_send_budget_ms(const og_config_t *cfg, int channels)
{
    uint64_t ms = (uint64_t)OG_SEND_BUDGET_WRITES * 2u * (uint64_t)cfg->db_timeout_ms +
                  (uint64_t)(channels > 0 ? channels : 0) * (uint64_t)cfg->attempt_timeout_ms +
                  OG_SEND_BUDGET_SLACK_MS;
    return ms < INT32_MAX ? (uint32_t)ms : INT32_MAX;
}
