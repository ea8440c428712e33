#!/usr/bin/env python3
"""Embeds the statements of sql/queries/*.sql into a C source file as og_store_stmts, the
table of prepared statements that include/data/omnigate/store.h declares.

Each statement is led by its name, a line saying what it does and one line per parameter:

    -- name: tenant_get
    -- Reads one tenant.
    -- $1 = tenant id
    SELECT ... FROM tenants WHERE id = $1;

The name is the prepared statement's name and, upper-cased after OG_Q_, its value of
enum og_store_stmt. A statement named X_many is the set form of X (og_db_stmt_t.many, in
include/data/omnigate/db.h): it must take as many parameters as X.

The build fails when a name is not in that enum or comes twice, when a
value of the enum has no statement, when the $N lines do not document exactly the parameters
the statement uses ($1 to its highest), or when a statement does not end with its only
semicolon (a missing name line would otherwise glue two statements into one). PostgreSQL
receives the statement without its comment lines and its semicolon.

usage: embed_queries.py OUTPUT.c STORE.h FILE.sql...
"""
import os
import re
import sys

from embed_migrations import c_string

NAME = re.compile(r"--\s*name:\s*(\S+)\s*")
PARAM = re.compile(r"--\s*\$(\d+)\s*=")


def fail(where, message):
    sys.exit("embed_queries.py: %s: %s" % (where, message))


def enum_names(header):
    """The members of enum og_store_stmt, without OG_Q__COUNT."""
    with open(header, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"enum\s+og_store_stmt\s*\{(.*?)\};", text, re.S)
    if not m:
        fail(header, "no enum og_store_stmt")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    members = [x.strip() for x in body.split(",") if x.strip()]
    for x in members:
        if not re.fullmatch(r"OG_Q_[A-Z0-9_]+", x):
            fail(header, "enum og_store_stmt: %r is not a plain OG_Q_ name" % x)
    return [x for x in members if x != "OG_Q__COUNT"]


def parse(path):
    """The statements of one file, as (name, "path:line", sql, nparams)."""
    blocks = []  # one per '-- name:' line: its name, where it is, its documentation, its SQL
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f.read().splitlines(), 1):
            m = NAME.fullmatch(line)
            if m:
                blocks.append((m.group(1), "%s:%d" % (path, number), [], []))
            elif not line.strip():
                continue
            elif line.lstrip().startswith("--"):
                # Comments before a statement's SQL document it; those inside it are for the
                # reader only, and those before the first statement describe the file.
                if blocks and not blocks[-1][3]:
                    blocks[-1][2].append(line.strip())
            elif not blocks:
                fail("%s:%d" % (path, number), "SQL before the first '-- name:' line")
            else:
                blocks[-1][3].append(line.rstrip())
    return [(name, where) + check(name, where, doc, body) for name, where, doc, body in blocks]


def check(name, where, doc, body):
    """The SQL to send and its parameter count, once the statement is as the file format wants."""
    where += ": " + name
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        fail(where, "a name is lower case letters, digits and underscores")
    if all(PARAM.match(d) for d in doc):
        fail(where, "no line saying what the statement does")
    sql = "\n".join(body)
    if not sql.endswith(";") or sql.count(";") != 1:
        fail(where, "the statement must end with its only semicolon (is a '-- name:' line missing?)")
    sql = sql[:-1]
    used = {int(n) for n in re.findall(r"\$(\d+)", sql)}
    nparams = max(used, default=0)
    documented = [int(PARAM.match(d).group(1)) for d in doc if PARAM.match(d)]
    if documented != list(range(1, nparams + 1)):
        fail(where, "document $1 to $%d, one '-- $N = ...' line each, in order (found %s)" %
             (nparams, ", ".join("$%d" % n for n in documented) or "none"))
    if used != set(documented):
        fail(where, "$%d is documented but not used" % min(set(documented) - used))
    return sql, nparams


def main():
    # Meson names the inputs from the build directory (../src/../sql/...): shorten for messages.
    output, header, files = sys.argv[1], os.path.normpath(sys.argv[2]), map(os.path.normpath, sys.argv[3:])
    members = enum_names(header)
    found = {}
    for path in files:
        for name, where, sql, nparams in parse(path):
            member = "OG_Q_" + name.upper()
            if name in found:
                fail(where, "%s is also defined at %s" % (name, found[name][0]))
            if member not in members:
                fail(where, "%s is not in enum og_store_stmt (%s): add it there or rename it" %
                     (member, header))
            found[name] = (where, sql, nparams)
    missing = [m for m in members if m[len("OG_Q_"):].lower() not in found]
    if missing:
        fail(header, "no '-- name:' statement in sql/queries for %s" % ", ".join(missing))
    for name, (where, sql, nparams) in found.items():
        if name.endswith("_many"):
            single = found.get(name[:-len("_many")])
            if single is None:
                fail(where, "%s is the set form of %s, which does not exist" % (name, name[:-len("_many")]))
            if single[2] != nparams:
                fail(where, "%s takes %d parameters, %s %d: a set form takes the same" %
                     (name, nparams, name[:-len("_many")], single[2]))
    with open(output, "w", encoding="utf-8") as out:
        out.write("/* Generated by src/tools/embed_queries.py from the files of sql/queries/: do not edit. */\n")
        out.write('#include "omnigate/store.h"\n\n')
        out.write("const og_db_stmt_t og_store_stmts[OG_Q__COUNT] = {\n")
        for member in members:
            name = member[len("OG_Q_"):].lower()
            where, sql, nparams = found[name]
            out.write("    /* %s */\n" % os.path.basename(where))
            # The log pages run on the read pools only (src/product/logs/logs_api.c): the write
            # pools need not prepare them.
            read_pool = os.path.basename(where.split(":")[0]) == "logs.sql"
            many = "OG_Q_%s_MANY + 1" % name.upper() if name + "_many" in found else "0"
            out.write("    [%s] = {\"%s\",\n        %s,\n        %d, %s, %s},\n" %
                      (member, name, c_string(sql), nparams, "true" if read_pool else "false", many))
        out.write("};\n")


if __name__ == "__main__":
    main()
