/*
 * The limits of queued sends (API.md §19), defined once: what a send's `sendAt` and
 * `validitySeconds` may be. The default validity is OMNIGATE_QUEUE_VALIDITY_S (config.h); the
 * rates are pacing.h's.
 */
#ifndef OMNIGATE_QUEUE_QUEUE_H
#define OMNIGATE_QUEUE_QUEUE_H

#define OG_QUEUE_VALIDITY_MIN_S   10
#define OG_QUEUE_VALIDITY_MAX_S   172800
#define OG_QUEUE_SEND_AT_PAST_MS  60000LL                   /* sendAt up to 60 s ago */
#define OG_QUEUE_SEND_AT_AHEAD_MS (35LL * 24 * 3600 * 1000) /* ... and up to 35 days ahead */

#endif
