/*
 * The address guard. See include/net/omnigate/addrguard.h. Pure functions over address bytes:
 * the unit test (test/unit/test_addrguard.c) walks every block.
 */
#include "omnigate/addrguard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* True when the first `bits` bits of a and p agree. */
static bool in_prefix(const unsigned char *a, const unsigned char *p, int bits)
{
    int bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, p, (size_t)bytes) != 0)
        return false;
    if (rest == 0)
        return true;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[bytes] & mask) == (p[bytes] & mask);
}

typedef struct block {
    unsigned char prefix[16];
    int bits;
    og_addr_class_t cls;
} block_t;

static const block_t v4_blocks[] = {
    {{0}, 8, OG_ADDR_UNSPECIFIED},          /* 0.0.0.0/8: "this network" */
    {{10}, 8, OG_ADDR_PRIVATE},             /* RFC 1918 */
    {{100, 64}, 10, OG_ADDR_CGNAT},         /* RFC 6598 shared address space */
    {{127}, 8, OG_ADDR_LOOPBACK},           /* RFC 1122 */
    {{169, 254}, 16, OG_ADDR_LINK_LOCAL},   /* RFC 3927 */
    {{172, 16}, 12, OG_ADDR_PRIVATE},       /* RFC 1918 */
    {{192, 0, 0}, 24, OG_ADDR_RESERVED},    /* RFC 6890 IETF protocol assignments */
    {{192, 0, 2}, 24, OG_ADDR_RESERVED},    /* RFC 5737 TEST-NET-1 */
    {{192, 88, 99}, 24, OG_ADDR_RESERVED},  /* RFC 7526 6to4 relay anycast */
    {{192, 168}, 16, OG_ADDR_PRIVATE},      /* RFC 1918 */
    {{198, 18}, 15, OG_ADDR_RESERVED},      /* RFC 2544 benchmarking */
    {{198, 51, 100}, 24, OG_ADDR_RESERVED}, /* RFC 5737 TEST-NET-2 */
    {{203, 0, 113}, 24, OG_ADDR_RESERVED},  /* RFC 5737 TEST-NET-3 */
    {{224}, 4, OG_ADDR_MULTICAST},          /* RFC 5771 */
    {{240}, 4, OG_ADDR_RESERVED},           /* RFC 1112 reserved, and 255.255.255.255 */
};

static const block_t v6_blocks[] = {
    {{0}, 128, OG_ADDR_UNSPECIFIED},                                           /* :: */
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, OG_ADDR_LOOPBACK}, /* ::1 */
    {{0x01, 0x00}, 64, OG_ADDR_RESERVED},                                      /* 100::/64 discard */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, OG_ADDR_RESERVED},                          /* documentation */
    {{0xfc}, 7, OG_ADDR_PRIVATE},                                              /* RFC 4193 unique local */
    {{0xfe, 0x80}, 10, OG_ADDR_LINK_LOCAL},                                    /* fe80::/10 */
    {{0xfe, 0xc0}, 10, OG_ADDR_PRIVATE},                                       /* site-local (deprecated) */
    {{0xff}, 8, OG_ADDR_MULTICAST},                                            /* ff00::/8 */
};

/* IPv6 prefixes that carry an IPv4 address, and where. */
static const struct {
    unsigned char prefix[16];
    int bits;
    int v4_at; /* byte offset of the embedded IPv4 address */
} v6_embeds[] = {
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, 12}, /* ::ffff:a.b.c.d, IPv4-mapped */
    {{0}, 96, 12},                                        /* ::a.b.c.d, IPv4-compatible */
    {{0x00, 0x64, 0xff, 0x9b}, 96, 12},                   /* 64:ff9b::a.b.c.d, NAT64 */
    {{0x20, 0x02}, 16, 2},                                /* 2002:aabb:ccdd::/48, 6to4 */
};

og_addr_class_t og_addr_class_v4(const unsigned char a[4])
{
    for (size_t i = 0; i < sizeof(v4_blocks) / sizeof(v4_blocks[0]); i++)
        if (in_prefix(a, v4_blocks[i].prefix, v4_blocks[i].bits))
            return v4_blocks[i].cls;
    return OG_ADDR_PUBLIC;
}

og_addr_class_t og_addr_class_v6(const unsigned char a[16])
{
    /* The exact addresses (::, ::1) before the embeddings whose prefix covers them. */
    for (size_t i = 0; i < sizeof(v6_blocks) / sizeof(v6_blocks[0]); i++)
        if (in_prefix(a, v6_blocks[i].prefix, v6_blocks[i].bits))
            return v6_blocks[i].cls;
    for (size_t i = 0; i < sizeof(v6_embeds) / sizeof(v6_embeds[0]); i++)
        if (in_prefix(a, v6_embeds[i].prefix, v6_embeds[i].bits))
            return og_addr_class_v4(a + v6_embeds[i].v4_at);
    return OG_ADDR_PUBLIC;
}

og_addr_class_t og_addr_class(const struct sockaddr *sa)
{
    if (sa == NULL)
        return OG_ADDR_RESERVED;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        return og_addr_class_v4((const unsigned char *)&in.sin_addr);
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        return og_addr_class_v6(in6.sin6_addr.s6_addr);
    }
    return OG_ADDR_RESERVED;
}

bool og_addr_class_text(const char *s, og_addr_class_t *out)
{
    unsigned char a[16];
    char buf[64];
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '[' && s[n - 1] == ']' && n - 2 < sizeof(buf)) {
        memcpy(buf, s + 1, n - 2);
        buf[n - 2] = '\0';
        s = buf;
    }
    if (inet_pton(AF_INET, s, a) == 1) {
        *out = og_addr_class_v4(a);
        return true;
    }
    if (inet_pton(AF_INET6, s, a) == 1) {
        *out = og_addr_class_v6(a);
        return true;
    }
    return false;
}

const char *og_addr_class_name(og_addr_class_t c)
{
    switch (c) {
    case OG_ADDR_PUBLIC:
        return "public";
    case OG_ADDR_UNSPECIFIED:
        return "unspecified";
    case OG_ADDR_LOOPBACK:
        return "loopback";
    case OG_ADDR_PRIVATE:
        return "private";
    case OG_ADDR_LINK_LOCAL:
        return "link-local";
    case OG_ADDR_CGNAT:
        return "shared (CGNAT)";
    case OG_ADDR_MULTICAST:
        return "multicast";
    case OG_ADDR_RESERVED:
        return "reserved";
    }
    return "?";
}
