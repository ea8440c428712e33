/*
 * The address guard of outbound calls to URLs a tenant chose (API.md §12, the SSRF guard):
 * which IP addresses are not "the public Internet" and must never be connected to. Responsible
 * for classifying one address; not for resolving names or refusing connections (http_client.c
 * asks it about each address it is about to connect to, after DNS).
 *
 * Refused: unspecified and "this network" (0.0.0.0/8, ::), loopback (127/8, ::1), private
 * (RFC 1918: 10/8, 172.16/12, 192.168/16; RFC 4193: fc00::/7, and the deprecated site-local
 * fec0::/10), link-local (169.254/16, fe80::/10), shared address space or CGNAT (100.64/10),
 * multicast (224/4, ff00::/8), and the other special-purpose blocks no webhook receiver lives
 * in (192.0.0/24, documentation and benchmarking ranges, 240/4 and broadcast, 2001:db8::/32,
 * 100::/64). An IPv6 address that carries an IPv4 address (IPv4-mapped ::ffff:0:0/96,
 * IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by that IPv4 address.
 */
#ifndef OMNIGATE_ADDRGUARD_H
#define OMNIGATE_ADDRGUARD_H

#include <stdbool.h>

#include <sys/socket.h>

typedef enum og_addr_class {
    OG_ADDR_PUBLIC = 0,
    OG_ADDR_UNSPECIFIED,
    OG_ADDR_LOOPBACK,
    OG_ADDR_PRIVATE,
    OG_ADDR_LINK_LOCAL,
    OG_ADDR_CGNAT,
    OG_ADDR_MULTICAST,
    OG_ADDR_RESERVED, /* other special-purpose blocks, and address families other than IP */
} og_addr_class_t;

/* The class of an IPv4 address given as its 4 bytes in network order. */
og_addr_class_t og_addr_class_v4(const unsigned char a[4]);

/* The class of an IPv6 address given as its 16 bytes. */
og_addr_class_t og_addr_class_v6(const unsigned char a[16]);

/* The class of a socket address (AF_INET or AF_INET6; anything else is OG_ADDR_RESERVED). */
og_addr_class_t og_addr_class(const struct sockaddr *sa);

/* The class of an address literal ("10.0.0.1", "::1", "[::1]"); false when `s` is not one
 * (a host name). */
bool og_addr_class_text(const char *s, og_addr_class_t *out);

/* "public", "loopback", "private", ... for messages. */
const char *og_addr_class_name(og_addr_class_t c);

#endif
