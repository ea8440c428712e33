/*
 * The main of a harness built without libFuzzer: runs LLVMFuzzerTestOneInput once on each file
 * named on the command line, or on each file of each directory named (not recursively), in
 * name order. A broken invariant or a sanitizer report aborts it, the file's name printed
 * just before; `meson test --suite fuzz` runs it over the harness's corpus. h2o's fuzz/ does
 * the same for its drivers.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Reads the whole file; NULL (with a message) on failure. */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return NULL;
    }
    uint8_t *buf = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *n = realloc(buf, cap);
            if (n == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = n;
        }
        size_t got = fread(buf + *len, 1, cap - *len, f);
        *len += got;
        if (got == 0)
            break;
    }
    if (buf != NULL && ferror(f)) {
        perror(path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static bool run_file(const char *path)
{
    size_t len;
    uint8_t *data = slurp(path, &len);
    if (data == NULL)
        return false;
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    /* A copy of exactly `len` bytes, so ASan sees any read past the input. */
    uint8_t *exact = malloc(len ? len : 1);
    if (exact == NULL) {
        free(data);
        return false;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return true;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `dir`; returns how many, or -1 on an error. */
static long run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        perror(dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    long ran = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            char **grown = realloc(names, cap * sizeof(*names));
            if (grown == NULL) {
                ran = -1;
                break;
            }
            names = grown;
        }
        size_t plen = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[n] = malloc(plen)) == NULL) {
            ran = -1;
            break;
        }
        snprintf(names[n++], plen, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (ran == 0)
        qsort(names, n, sizeof(*names), by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (ran >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            ran = run_file(names[i]) ? ran + 1 : -1;
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        long ran = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) ? 1 : -1;
        if (ran < 0)
            return 1;
        total += ran;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input found: an empty corpus proves nothing\n");
        return 1;
    }
    printf("replay: %ld inputs, no invariant broken\n", total);
    return 0;
}
