#!/usr/bin/env python3
"""Embeds the statements of sql/queries/*.sql into a C source file as og_store_stmts, the
table of prepared statements that include/data/omnigate/store.h declares, and writes a header
of named binders and column indexes for them (og_store_names.h, which store.h includes).

Each statement is led by its name, a line saying what it does, one line per parameter giving
its name and meaning (the name alone when it says it all) and, when it returns rows, the names
of its columns in order (a long list goes on on the next line after a comma):

    -- name: otp_sent
    -- Records whether the SMS with the code went out.
    -- $1 tenant_id
    -- $2 reference
    -- $3 sent = 'true' or 'false'
    UPDATE ...;

    -- name: tenant_unified
    -- Whether a tenant may use the unified API.
    -- $1 tenant_id
    -- columns: unified
    SELECT unified_api_enabled AS unified FROM tenants WHERE id = $1;

Statements that return the same row say so (`-- columns: tenant row`), the row being declared
once, in the comment that opens a file of sql/queries:

    -- row tenant: id, name, unified, settings, created, updated, xmin

The name is the prepared statement's name and, upper-cased after OG_Q_, its value of
enum og_store_stmt. A parameter's name and a column's are C identifiers in lower case; the
columns are those PostgreSQL describes, names included (test/e2e/test_query_columns.py checks
every statement against a migrated database), so an expression gets its name with AS.

For each statement X the header has, in enum order:
  - og_q_X_t, a struct of its parameters by name (const char *, NULL = SQL NULL), and
    og_q_X(call, &params), which sets call->stmt to OG_Q_X and call->values[] in order and
    returns call: og_q_X(&op->stmts[n], &(og_q_X_t){.tenant_id = id}). A statement without
    parameters has og_q_X(call) only. Statements whose parameters have the same names in the
    same order share the first one's struct (og_q_Y_t is a typedef of og_q_X_t), so a caller
    that picks one of them at run time fills one struct;
  - its column indexes, OG_C_X_<COLUMN>, or for a declared row the row's, OG_<ROW>_<COLUMN>.
A statement named X_many is the set form of X (og_db_stmt_t.many, in include/data/omnigate/db.h):
it takes X's parameters, under the same names (each an array), and returns nothing or its
ordinal `ord` followed by X's columns. Callers bind X, which db.c turns into X_many: X_many
gets no binder and no column indexes.

The build fails when a name is not in that enum or comes twice, when a value of the enum has no
statement, when the $N lines do not document exactly the parameters the statement uses ($1 to
its highest) each with a name, when a statement has two parameters or two columns of one name,
when a row is unknown or declared twice, when a set form's parameters or columns are not its
single form's, when a statement takes more than OG_DB_MAX_PARAMS parameters (a static assertion
in the header), or when a statement does not end with its only semicolon (a missing name line
would otherwise glue two statements into one). PostgreSQL receives the statement without its
comment lines and its semicolon.

usage: embed_queries.py OUTPUT.c OUTPUT.h STORE.h FILE.sql...
"""
import os
import re
import sys

from embed_migrations import c_string

NAME = re.compile(r"--\s*name:\s*(\S+)\s*")
PARAM = re.compile(r"--\s*\$(\d+)(.*)")  # any parameter line; PARAM_LINE is its form
PARAM_LINE = re.compile(r" ([a-z][a-z0-9_]*)( = \S.*)?")
COLUMNS = re.compile(r"--\s*columns:(.*)")
ROW = re.compile(r"--\s*row\s+(\S+):(.*)")
IDENT = re.compile(r"[a-z][a-z0-9_]*")
ROW_REF = re.compile(r"([a-z][a-z0-9_]*) row")
# Names a struct member cannot take: C's keywords, and what the standard headers define.
C_RESERVED = set("""auto break case char const continue default do double else enum extern float
    for goto if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while bool true false errno""".split())


def fail(where, message):
    sys.exit("embed_queries.py: %s: %s" % (where, message))


class Statement:
    def __init__(self, name, where, sql, params, columns, row):
        self.name = name
        self.where = where  # "path:line" of its name line
        self.sql = sql  # as PostgreSQL receives it
        self.params = params  # [(name, meaning)] for $1, $2, ...
        self.columns = columns  # [name] in order; [] when it returns none (or none is documented)
        self.row = row  # the declared row its columns are, or None


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


def names(where, what, text):
    """The comma-separated names of `text`, each a lower-case identifier, none twice."""
    out = [x.strip() for x in text.split(",")]
    for x in out:
        if not IDENT.fullmatch(x):
            fail(where, "%s: %r is not a name (lower case letters, digits and underscores)" % (what, x))
    dup = [x for x in out if out.count(x) > 1]
    if dup:
        fail(where, "%s: %s comes twice" % (what, dup[0]))
    return out


def parse(path, rows):
    """The statements of one file, as Statement with their columns not yet resolved (a row
    reference stays in .row); the rows its opening comment declares go into `rows`."""
    blocks = []  # one per '-- name:' line: its name, where it is, its documentation, its SQL
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f.read().splitlines(), 1):
            where = "%s:%d" % (path, number)
            m = NAME.fullmatch(line)
            if m:
                blocks.append((m.group(1), where, [], []))
            elif not line.strip():
                continue
            elif line.lstrip().startswith("--"):
                # Comments before a statement's SQL document it; those inside it are for the
                # reader only, and those before the first statement describe the file (and
                # declare its rows).
                r = ROW.fullmatch(line.strip())
                if r and blocks:
                    fail(where, "a row is declared in the comment that opens a file, before its statements")
                if r:
                    if not IDENT.fullmatch(r.group(1)):
                        fail(where, "row %r: a row's name is a lower-case identifier" % r.group(1))
                    if r.group(1) in rows:
                        fail(where, "row %s is also declared at %s" % (r.group(1), rows[r.group(1)][0]))
                    rows[r.group(1)] = (where, names(where, "row " + r.group(1), r.group(2)))
                elif blocks and not blocks[-1][3]:
                    blocks[-1][2].append((where, line.strip()))
            elif not blocks:
                fail(where, "SQL before the first '-- name:' line")
            else:
                blocks[-1][3].append(line.rstrip())
    return [check(name, where, doc, body) for name, where, doc, body in blocks]


def check(name, where, doc, body):
    """The Statement, once it is as the file format wants."""
    at = where + ": " + name
    if not IDENT.fullmatch(name):
        fail(at, "a name is lower case letters, digits and underscores")
    if all(PARAM.match(d) or COLUMNS.match(d) for _, d in doc):
        fail(at, "no line saying what the statement does")
    sql = "\n".join(body)
    if not sql.endswith(";") or sql.count(";") != 1:
        fail(at, "the statement must end with its only semicolon (is a '-- name:' line missing?)")
    sql = sql[:-1]
    used = {int(n) for n in re.findall(r"\$(\d+)", sql)}
    if 0 in used:
        fail(at, "$0 is no parameter: they are numbered from $1")
    nparams = max(used, default=0)
    params, documented, columns, row = [], [], None, None
    doc = iter(doc)
    for line_at, d in doc:
        m = PARAM.match(d)
        if m:
            documented.append(int(m.group(1)))
            p = PARAM_LINE.fullmatch(m.group(2))
            if p is None:
                fail(line_at, "%s: write '-- $%s name = meaning' (or '-- $%s name' when the name says it), "
                     "the name a lower-case C identifier" % (name, m.group(1), m.group(1)))
            if p.group(1) in C_RESERVED:
                fail(line_at, "%s: $%s cannot be named %s (a C keyword)" % (name, m.group(1), p.group(1)))
            params.append((p.group(1), (p.group(2) or " = ")[3:]))
            continue
        m = COLUMNS.match(d)
        if m:
            if columns is not None or row is not None:
                fail(line_at, "%s: one '-- columns:' line per statement" % name)
            text = m.group(1).strip()
            while text.endswith(","):  # the list goes on on the next line
                more = next(doc, (line_at, "--"))[1]
                text += " " + more[2:].strip()
            r = ROW_REF.fullmatch(text)
            if r:
                row = r.group(1)
            else:
                columns = names(line_at, name + ": columns", text)
    if documented != list(range(1, nparams + 1)):
        fail(at, "document $1 to $%d, one '-- $N name = ...' line each, in order (found %s)" %
             (nparams, ", ".join("$%d" % n for n in documented) or "none"))
    if used != set(documented):
        fail(at, "$%d is documented but not used" % min(set(documented) - used))
    dup = [p for p, _ in params if [q for q, _ in params].count(p) > 1]
    if dup:
        fail(at, "two parameters are named %s" % dup[0])
    return Statement(name, where, sql, params, columns or [], row)


def load(files):
    """Every statement of `files`, by name, in file order, with rows resolved, checked
    against each other (but not against store.h): {name: Statement}, {row: (where, columns)}."""
    rows, found = {}, {}
    for path in files:
        for s in parse(path, rows):
            if s.name in found:
                fail(s.where, "%s is also defined at %s" % (s.name, found[s.name].where))
            found[s.name] = s
    for s in found.values():
        if s.row is not None:
            if s.row not in rows:
                fail(s.where, "%s: no '-- row %s:' line in the comment opening a file of sql/queries" %
                     (s.name, s.row))
            s.columns = rows[s.row][1]
    for s in found.values():
        if not s.name.endswith("_many"):
            continue
        single = found.get(s.name[:-len("_many")])
        if single is None:
            fail(s.where, "%s is the set form of %s, which does not exist" % (s.name, s.name[:-len("_many")]))
        if [p for p, _ in s.params] != [p for p, _ in single.params]:
            fail(s.where, "%s takes %s; a set form takes its single form's parameters, by the same names: %s" %
                 (s.name, ", ".join(p for p, _ in s.params), ", ".join(p for p, _ in single.params)))
        if s.columns and s.columns != ["ord"] + single.columns:
            fail(s.where, "%s returns %s: a set form returns nothing, or ord and then %s's columns (%s)" %
                 (s.name, ", ".join(s.columns), single.name, ", ".join(single.columns)))
    return found, rows


def write_table(output, members, found):
    with open(output, "w", encoding="utf-8") as out:
        out.write("/* Generated by src/tools/embed_queries.py from the files of sql/queries/: do not edit. */\n")
        out.write('#include "omnigate/store.h"\n\n')
        out.write("const og_db_stmt_t og_store_stmts[OG_Q__COUNT] = {\n")
        for member in members:
            name = member[len("OG_Q_"):].lower()
            s = found[name]
            out.write("    /* %s */\n" % os.path.basename(s.where))
            # The log pages run on the read pools only (src/product/logs/logs_api.c): the write
            # pools need not prepare them.
            read_pool = os.path.basename(s.where.split(":")[0]) == "logs.sql"
            many = "OG_Q_%s_MANY + 1" % name.upper() if name + "_many" in found else "0"
            out.write("    [%s] = {\"%s\",\n        %s,\n        %d, %s, %s},\n" %
                      (member, name, c_string(s.sql), len(s.params), "true" if read_pool else "false", many))
        out.write("};\n")


def comment(text):
    return text.replace("*/", "* /")


def enum(out, prefix, columns, what):
    out.write("enum { /* %s */\n" % comment(what))
    for c in columns:
        out.write("    %s%s,\n" % (prefix, c.upper()))
    out.write("};\n")


def write_names(output, members, found, rows):
    out = open(output, "w", encoding="utf-8")
    out.write("/* Generated by src/tools/embed_queries.py from the files of sql/queries/: do not edit.\n"
              " * Included by omnigate/store.h, which says how to use it. */\n")
    out.write("#ifndef OG_STORE_NAMES_H\n#define OG_STORE_NAMES_H\n\n")
    widest = max(found.values(), key=lambda s: len(s.params))
    out.write('_Static_assert(%d <= OG_DB_MAX_PARAMS, "%s: %s takes %d parameters, more than '
              'OG_DB_MAX_PARAMS");\n\n' % (len(widest.params), widest.where, widest.name, len(widest.params)))
    for row, (where, columns) in rows.items():
        enum(out, "OG_%s_" % row.upper(), columns, "row %s (%s)" % (row, where))
    shapes = {}  # parameter names -> the statement whose struct has them
    # Statements by parameter names: a struct shared by several says no one statement's meanings.
    sharing = {}
    for member in members:
        s = found[member[len("OG_Q_"):].lower()]
        sharing.setdefault(tuple(p for p, _ in s.params), []).append(s.name)
    for member in members:
        s = found[member[len("OG_Q_"):].lower()]
        if s.name.endswith("_many"):
            continue  # db.c makes it of its single form's binding
        out.write("\n/* %s (%s) */\n" % (s.name, s.where))
        t = "og_q_%s_t" % s.name
        if s.params:
            key = tuple(p for p, _ in s.params)
            if key in shapes:
                out.write("typedef og_q_%s_t %s; /* the same parameters */\n" % (shapes[key], t))
            else:
                shapes[key] = s.name
                shared = len(sharing[key]) > 1
                if shared:
                    out.write("/* The parameters of %s: each means what its statement's $N line says. */\n" %
                              comment(", ".join(sharing[key])))
                out.write("typedef struct og_q_%s {\n" % s.name)
                for p, meaning in s.params:
                    note = " /* %s */" % comment(meaning) if meaning and not shared else ""
                    out.write("    const char *%s;%s\n" % (p, note))
                out.write("} %s;\n" % t)
            out.write("static inline og_db_call_t *og_q_%s(og_db_call_t *c, const %s *p)\n{\n" % (s.name, t))
        else:
            out.write("static inline og_db_call_t *og_q_%s(og_db_call_t *c)\n{\n" % s.name)
        out.write("    c->stmt = %s;\n" % member)
        for i, (p, _) in enumerate(s.params):
            out.write("    c->values[%d] = p->%s;\n" % (i, p))
        out.write("    return c;\n}\n")
        if s.columns and s.row is None:
            enum(out, "OG_C_%s_" % s.name.upper(), s.columns, "its columns")
    out.write("\n#endif\n")
    out.close()


def main():
    # Meson names the inputs from the build directory (../src/../sql/...): name them from the
    # root of the tree (store.h is in include/data/omnigate/) in messages and comments.
    table, header_out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    root = os.path.join(os.path.dirname(sys.argv[3]), "..", "..", "..")
    header, files = os.path.relpath(sys.argv[3], root), [os.path.relpath(f, root) for f in sys.argv[4:]]
    os.chdir(root)
    members = enum_names(header)
    found, rows = load(files)
    for s in found.values():
        member = "OG_Q_" + s.name.upper()
        if member not in members:
            fail(s.where, "%s is not in enum og_store_stmt (%s): add it there or rename it" % (member, header))
    missing = [m for m in members if m[len("OG_Q_"):].lower() not in found]
    if missing:
        fail(header, "no '-- name:' statement in sql/queries for %s" % ", ".join(missing))
    write_table(table, members, found)
    write_names(header_out, members, found, rows)


if __name__ == "__main__":
    main()
