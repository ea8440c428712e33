"""The gateway's error codes and their HTTP statuses, read from the X-macro lists that declare
them (struct og_errcode in include/net/omnigate/api.h): every `#define <OWNER>_ERRCODES(X)` under
include/, today OG_API_ERRCODES (the HTTP core's, api.h) and OG_APP_ERRCODES (the product's,
app/errors.h). For the OpenAPI generator (openapi.py) and test/e2e/test_openapi.py, so that both
hold every documented code to the status the binary answers it with. The simulator's own codes
(test/sim/sim.h) are not the gateway's and are not read.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIST = re.compile(r"^#define \w+_ERRCODES\(X\)((?:.*\\\n)*.*)$", re.M)
ENTRY = re.compile(r'\bX\((\w+), "([a-z_]+)", (\d{3})\)')


def statuses(root=ROOT):
    """{name: status} of every code; ValueError for a code declared twice or a symbol that is
    not OG_E_ and its name in capitals."""
    out = {}
    for d, _, names in sorted(os.walk(os.path.join(root, "include"))):
        for name in sorted(n for n in names if n.endswith(".h")):
            path = os.path.join(d, name)
            with open(path, encoding="utf-8") as f:
                lists = LIST.findall(f.read())
            for sym, code, status in (e for body in lists for e in ENTRY.findall(body)):
                where = os.path.relpath(path, root)
                if sym != "OG_E_" + code.upper():
                    raise ValueError("%s: %s is declared as %s, not OG_E_%s" % (where, code, sym, code.upper()))
                if code in out:
                    raise ValueError("%s: %s is declared twice" % (where, code))
                out[code] = int(status)
    return out
