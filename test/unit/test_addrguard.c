/*
 * The SSRF guard's address classifier (src/net/addrguard.c): every refused block at its edges
 * (the first and last address inside, the neighbours outside), IPv6 forms that carry an IPv4
 * address, and socket addresses as curl hands them over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "omnigate/addrguard.h"

static og_addr_class_t cls(const char *text)
{
    og_addr_class_t c = OG_ADDR_PUBLIC;
    assert_true(og_addr_class_text(text, &c));
    return c;
}

/* IPv4: each refused block from its first to its last address, and public neighbours. */
static void test_v4_blocks(void **state)
{
    static const struct {
        const char *addr;
        og_addr_class_t c;
    } cases[] = {
        {"0.0.0.0", OG_ADDR_UNSPECIFIED},     {"0.255.255.255", OG_ADDR_UNSPECIFIED},
        {"1.0.0.0", OG_ADDR_PUBLIC},          {"9.255.255.255", OG_ADDR_PUBLIC},
        {"10.0.0.0", OG_ADDR_PRIVATE},        {"10.255.255.255", OG_ADDR_PRIVATE},
        {"11.0.0.0", OG_ADDR_PUBLIC},         {"100.63.255.255", OG_ADDR_PUBLIC},
        {"100.64.0.0", OG_ADDR_CGNAT},        {"100.127.255.255", OG_ADDR_CGNAT},
        {"100.128.0.0", OG_ADDR_PUBLIC},      {"126.255.255.255", OG_ADDR_PUBLIC},
        {"127.0.0.1", OG_ADDR_LOOPBACK},      {"127.255.255.254", OG_ADDR_LOOPBACK},
        {"128.0.0.0", OG_ADDR_PUBLIC},        {"169.253.255.255", OG_ADDR_PUBLIC},
        {"169.254.0.0", OG_ADDR_LINK_LOCAL},  {"169.254.169.254", OG_ADDR_LINK_LOCAL},
        {"169.255.0.0", OG_ADDR_PUBLIC},      {"172.15.255.255", OG_ADDR_PUBLIC},
        {"172.16.0.0", OG_ADDR_PRIVATE},      {"172.31.255.255", OG_ADDR_PRIVATE},
        {"172.32.0.0", OG_ADDR_PUBLIC},       {"192.0.0.1", OG_ADDR_RESERVED},
        {"192.0.2.10", OG_ADDR_RESERVED},     {"192.0.3.1", OG_ADDR_PUBLIC},
        {"192.167.255.255", OG_ADDR_PUBLIC},  {"192.168.0.0", OG_ADDR_PRIVATE},
        {"192.168.255.255", OG_ADDR_PRIVATE}, {"192.169.0.0", OG_ADDR_PUBLIC},
        {"198.18.0.0", OG_ADDR_RESERVED},     {"198.19.255.255", OG_ADDR_RESERVED},
        {"198.20.0.0", OG_ADDR_PUBLIC},       {"198.51.100.7", OG_ADDR_RESERVED},
        {"203.0.113.9", OG_ADDR_RESERVED},    {"223.255.255.255", OG_ADDR_PUBLIC},
        {"224.0.0.1", OG_ADDR_MULTICAST},     {"239.255.255.255", OG_ADDR_MULTICAST},
        {"240.0.0.0", OG_ADDR_RESERVED},      {"255.255.255.255", OG_ADDR_RESERVED},
        {"8.8.8.8", OG_ADDR_PUBLIC},          {"93.184.216.34", OG_ADDR_PUBLIC},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cls(cases[i].addr) != cases[i].c)
            fail_msg("%s: %s, expected %s", cases[i].addr, og_addr_class_name(cls(cases[i].addr)),
                     og_addr_class_name(cases[i].c));
    }
}

/* IPv6: the refused blocks, and IPv4 carried in mapped, compatible, NAT64 and 6to4 forms. */
static void test_v6_blocks(void **state)
{
    static const struct {
        const char *addr;
        og_addr_class_t c;
    } cases[] = {
        {"::", OG_ADDR_UNSPECIFIED},
        {"::1", OG_ADDR_LOOPBACK},
        {"[::1]", OG_ADDR_LOOPBACK},
        {"::2", OG_ADDR_UNSPECIFIED}, /* ::0.0.0.2, IPv4-compatible "this network" */
        {"fc00::1", OG_ADDR_PRIVATE},
        {"fdff:ffff::1", OG_ADDR_PRIVATE},
        {"fe00::1", OG_ADDR_PUBLIC},
        {"fe80::1", OG_ADDR_LINK_LOCAL},
        {"febf:ffff::1", OG_ADDR_LINK_LOCAL},
        {"fec0::1", OG_ADDR_PRIVATE},
        {"ff02::1", OG_ADDR_MULTICAST},
        {"100::1", OG_ADDR_RESERVED},
        {"2001:db8::1", OG_ADDR_RESERVED},
        {"2001:4860:4860::8888", OG_ADDR_PUBLIC},
        {"2606:4700::1111", OG_ADDR_PUBLIC},
        {"::ffff:127.0.0.1", OG_ADDR_LOOPBACK},
        {"::ffff:7f00:1", OG_ADDR_LOOPBACK},
        {"::ffff:10.1.2.3", OG_ADDR_PRIVATE},
        {"::ffff:169.254.169.254", OG_ADDR_LINK_LOCAL},
        {"::ffff:8.8.8.8", OG_ADDR_PUBLIC},
        {"::127.0.0.1", OG_ADDR_LOOPBACK},
        {"64:ff9b::192.168.1.1", OG_ADDR_PRIVATE},
        {"64:ff9b::8.8.8.8", OG_ADDR_PUBLIC},
        {"2002:0a00:0001::1", OG_ADDR_PRIVATE}, /* 6to4 of 10.0.0.1 */
        {"2002:0808:0808::1", OG_ADDR_PUBLIC},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (cls(cases[i].addr) != cases[i].c)
            fail_msg("%s: %s, expected %s", cases[i].addr, og_addr_class_name(cls(cases[i].addr)),
                     og_addr_class_name(cases[i].c));
    }
}

/* Host names are not literals; socket addresses are read by family; other families refused. */
static void test_names_and_sockaddrs(void **state)
{
    og_addr_class_t c;
    assert_false(og_addr_class_text("localhost", &c));
    assert_false(og_addr_class_text("example.com", &c));
    assert_false(og_addr_class_text("127.1", &c)); /* curl may read it so; the connect check catches it */
    struct sockaddr_in in = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &in.sin_addr);
    assert_int_equal(og_addr_class((struct sockaddr *)&in), OG_ADDR_LOOPBACK);
    inet_pton(AF_INET, "1.1.1.1", &in.sin_addr);
    assert_int_equal(og_addr_class((struct sockaddr *)&in), OG_ADDR_PUBLIC);
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "::ffff:192.168.0.1", &in6.sin6_addr);
    assert_int_equal(og_addr_class((struct sockaddr *)&in6), OG_ADDR_PRIVATE);
    struct sockaddr other = {.sa_family = AF_UNIX};
    assert_int_equal(og_addr_class(&other), OG_ADDR_RESERVED);
    assert_int_equal(og_addr_class(NULL), OG_ADDR_RESERVED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v4_blocks),
        cmocka_unit_test(test_v6_blocks),
        cmocka_unit_test(test_names_and_sockaddrs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
