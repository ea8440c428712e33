"""Issue 28: the result columns that sql/queries documents (a statement's `-- columns:` line, or
the row it names) are the columns PostgreSQL describes for the statement, by name and in order.
The column indexes the code reads rows with (OG_C_*, OG_<ROW>_*) are generated from those lines
(src/tools/embed_queries.py), so this is what makes them read what they say."""

import glob
import os
import subprocess
import sys

from conftest import ROOT
from gwlib import migrate

sys.dont_write_bytecode = True  # no __pycache__ left in src/tools
sys.path.insert(0, os.path.join(ROOT, "src", "tools"))
import embed_queries  # noqa: E402


def described(url, statements):
    """name -> the column names PostgreSQL describes for each statement, as the gateway prepares
    it (its text, parameter types left to the server): psql's \\gdesc parses and describes a
    statement without running it."""
    script = "".join("\\echo ==== %s\n%s\n\\gdesc\n" % (s.name, s.sql) for s in statements)
    p = subprocess.run(["psql", url, "-XAt", "-v", "ON_ERROR_STOP=1", "-F", "\x1f"], input=script,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = {}
    for chunk in p.stdout.split("==== ")[1:]:
        name, _, body = chunk.partition("\n")
        # One "name<US>type" line per column; a statement without columns gets a sentence.
        out[name] = [line.split("\x1f")[0] for line in body.splitlines() if "\x1f" in line]
    return out


def test_every_statement_returns_the_columns_it_documents(fresh_db):
    """Each statement of sql/queries, described on a migrated database, has exactly the columns
    its documentation names, in that order (none missing, none extra, none renamed); one that
    documents none has none."""
    migrate(fresh_db)
    found, _ = embed_queries.load(sorted(glob.glob(os.path.join(ROOT, "sql", "queries", "*.sql"))))
    assert len(found) > 80
    got = described(fresh_db, found.values())
    wrong = ["%s (%s): documented [%s], PostgreSQL describes [%s]" %
             (s.name, s.where, ", ".join(s.columns), ", ".join(got.get(s.name, ["(nothing)"])))
             for s in found.values() if got.get(s.name) != s.columns]
    assert not wrong, "\n".join(wrong)
