/*
 * omnigate: command-line entry. Parses the configuration and hands over to the command.
 * Everything of substance lives in the four layer libraries (src/meson.build), so the tests,
 * the simulator and the fuzzers link the same code.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "og_build.h"
#include "omnigate/app/cli.h"
#include "omnigate/config.h"
#include "omnigate/app/gateway.h"
#include "omnigate/metrics.h"
#include "omnigate/supervisor.h"
#include "omnigate/worker.h"

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out, "Usage: omnigate <command> [--flag value ...]\n"
                 "\n"
                 "Commands:\n"
                 "  serve      run the gateway (a supervisor and OMNIGATE_WORKERS worker processes)\n"
                 "  migrate    apply pending schema migrations (safe while other instances run it)\n"
                 "  prune --before DATE [--batch N]\n"
                 "             delete log data (messages, attempts, SMS records, OTPs) created before DATE\n"
                 "             (YYYY-MM-DD or RFC 3339, at least a day ago) in batches of N rows (1000)\n"
                 "  version    print the version\n"
                 "  help       print this help\n");
    og_cli_admin_usage(out);
    fprintf(out, "\nSettings (environment variable or flag; the flag wins):\n");
    og_config_usage(out);
}

int main(int argc, char **argv)
{
    og_config_t cfg;
    char err[512];
    char *rest[16];
    int nrest = 16;
    if (!og_config_load(&cfg, environ, argc - 1, argv + 1, rest, &nrest, err, sizeof(err))) {
        fprintf(stderr, "omnigate: %s\n", err);
        og_config_free(&cfg);
        return 2;
    }
    const char *cmd = nrest > 0 ? rest[0] : NULL;
    int rc = 0;
    if (cmd == NULL) {
        usage(stderr);
        rc = 2;
    } else if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
    } else if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("omnigate %s\n", OG_VERSION);
    } else if (strcmp(cmd, "config-markdown") == 0) {
        og_config_markdown(stdout);
    } else if (strcmp(cmd, "metrics-markdown") == 0) {
        og_metrics_t m = {0};
        rc = og_worker_register_metrics(&m, &og_gateway_app, NULL) ? 0 : 1;
        og_metrics_markdown(&m, stdout);
    } else if (strcmp(cmd, "serve") == 0) {
        rc = og_cli_serve_check(&cfg);
        if (rc == 0)
            rc = og_supervisor_run(&cfg, &og_gateway_app);
    } else if (strcmp(cmd, "migrate") == 0) {
        rc = og_cli_migrate(&cfg);
    } else if (strcmp(cmd, "admin") == 0) {
        rc = og_cli_admin(&cfg, nrest - 1, rest + 1);
    } else if (strcmp(cmd, "prune") == 0) {
        rc = og_cli_prune(&cfg, nrest - 1, rest + 1);
    } else {
        fprintf(stderr, "omnigate: unknown command \"%s\" (try omnigate --help)\n", cmd);
        rc = 2;
    }
    og_config_free(&cfg);
    return rc;
}
