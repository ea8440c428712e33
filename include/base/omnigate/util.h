/*
 * The few macros every layer shares. Nothing with state, nothing that allocates.
 */
#ifndef OMNIGATE_UTIL_H
#define OMNIGATE_UTIL_H

#include <stddef.h>

/* The struct that embeds `ptr` as its `member` (uv handles, the HTTP core, curl requests). */
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
