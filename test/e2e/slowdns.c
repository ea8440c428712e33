/*
 * An LD_PRELOAD shim for test_db_deadline.py: a slow DNS server in a library. getaddrinfo(3)
 * answers the names listed in OG_SLOWDNS ("name=address,name=address"; an empty address: the
 * name does not exist) only after OG_SLOWDNS_DELAY_MS milliseconds, with that numeric address,
 * and appends "pid tid name" to the file OG_SLOWDNS_LOG for each such call, so a test can tell
 * which process and thread waited. Every other name goes to the real getaddrinfo untouched.
 *
 * Built without sanitizers (test/e2e/meson.build): the tests put the binary's own sanitizer
 * runtime first in LD_PRELOAD, as ASan requires, and this library after it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res);

/* The address OG_SLOWDNS maps `node` to, into addr ("" for a name that does not exist); false
 * when the name is not listed. */
static int listed(const char *node, char *addr, size_t addrlen)
{
    const char *spec = getenv("OG_SLOWDNS");
    size_t nlen = strlen(node);
    while (spec != NULL && *spec != '\0') {
        size_t len = strcspn(spec, ",");
        const char *eq = memchr(spec, '=', len);
        if (eq != NULL && (size_t)(eq - spec) == nlen && strncasecmp(spec, node, nlen) == 0) {
            size_t alen = len - nlen - 1;
            if (alen >= addrlen)
                return 0;
            memcpy(addr, eq + 1, alen);
            addr[alen] = '\0';
            return 1;
        }
        spec += len;
        if (*spec == ',')
            spec++;
    }
    return 0;
}

static void note(const char *node)
{
    const char *path = getenv("OG_SLOWDNS_LOG");
    if (path == NULL)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[320];
    int n = snprintf(line, sizeof(line), "%ld %ld %s\n", (long)getpid(), (long)syscall(SYS_gettid), node);
    if (n > 0 && (size_t)n < sizeof(line) && write(fd, line, (size_t)n) < 0) {
        /* Nothing to do: the test then sees one call fewer. */
    }
    close(fd);
}

static void delay(void)
{
    const char *ms = getenv("OG_SLOWDNS_DELAY_MS");
    long v = ms != NULL ? atol(ms) : 2000;
    struct timespec t = {.tv_sec = v / 1000, .tv_nsec = (v % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
    /* dlsym returns an object pointer; copying it is the portable way to a function pointer. */
    getaddrinfo_fn real;
    void *sym = dlsym(RTLD_NEXT, "getaddrinfo");
    if (sym == NULL)
        return EAI_SYSTEM;
    memcpy(&real, &sym, sizeof(real));
    char addr[64];
    if (node == NULL || !listed(node, addr, sizeof(addr)))
        return real(node, service, hints, res);
    note(node);
    delay();
    if (addr[0] == '\0')
        return EAI_NONAME;
    struct addrinfo h = {0};
    if (hints != NULL)
        h = *hints;
    h.ai_flags |= AI_NUMERICHOST;
    return real(addr, service, &h, res);
}
