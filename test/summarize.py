#!/usr/bin/env python3
"""Counts individual test cases across every suite of a meson build directory.

Usage: summarize.py BUILDDIR

Reads BUILDDIR/junit/*.xml (cmocka writes unit-*.xml, pytest writes e2e-*.xml) and
BUILDDIR/meson-logs/testlog.json (one JSON object per meson test). A meson test that failed,
crashed or timed out without its cases showing a failure counts as one more failure; a meson
test that wrote no JUnit file counts as one case (passed or failed by its meson result): so
does each corpus replay of suite "fuzz" (test/fuzz), one case per harness.

Prints one line per suite, then as its LAST line exactly `N passed, N failed` (plus
a line before it says how many were skipped). Exit status: 1 when anything failed or nothing ran,
else 0.
"""

import glob
import json
import os
import sys
import xml.etree.ElementTree as ET

OK_RESULTS = {"OK", "EXPECTEDFAIL"}
SKIP_RESULTS = {"SKIP"}


def parse_junit(path):
    """Returns (passed, failed, skipped, failed_names) for one JUnit XML file, or None if the
    file cannot be parsed (a crash mid-write)."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return None
    passed = failed = skipped = 0
    failed_names = []
    for case in root.iter("testcase"):
        name = "%s::%s" % (case.get("classname") or "", case.get("name") or "?")
        children = {child.tag for child in case}
        if "failure" in children or "error" in children:
            failed += 1
            failed_names.append(name)
        elif "skipped" in children:
            skipped += 1
        else:
            passed += 1
    # A <testsuite errors="N"> with no matching testcase (e.g. a collection error in pytest, or a
    # cmocka group setup failure) still has to count.
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    declared_errors = 0
    for s in suites:
        try:
            declared_errors += int(s.get("errors") or 0) + int(s.get("failures") or 0)
        except ValueError:
            pass
    if declared_errors > failed:
        failed_names.append("%s: %d error(s) outside test cases" % (os.path.basename(path), declared_errors - failed))
        failed = declared_errors
    return passed, failed, skipped, failed_names


def read_testlog(builddir):
    """meson test results: list of dicts with name, result, junit file stem guess."""
    path = os.path.join(builddir, "meson-logs", "testlog.json")
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return out


def junit_file_for(test, junit_files):
    """The JUnit file a meson test wrote, found from its environment (CMOCKA_XML_FILE) or its
    command line (--junitxml=...)."""
    env = test.get("env") or {}
    cands = []
    if env.get("CMOCKA_XML_FILE"):
        cands.append(env["CMOCKA_XML_FILE"])
    for arg in test.get("command") or []:
        if isinstance(arg, str) and arg.startswith("--junitxml="):
            cands.append(arg.split("=", 1)[1])
    for c in cands:
        c = os.path.realpath(c)
        for f in junit_files:
            if os.path.realpath(f) == c:
                return f
        # The file was expected but not written.
        return c
    name = test.get("name", "")
    for f in junit_files:
        stem = os.path.splitext(os.path.basename(f))[0]
        if stem in ("unit-" + name, "e2e-" + name, name):
            return f
    return None


def main(argv):
    if len(argv) != 2:
        print("usage: summarize.py BUILDDIR", file=sys.stderr)
        return 2
    builddir = argv[1]
    junit_files = sorted(glob.glob(os.path.join(builddir, "junit", "*.xml")))
    tests = read_testlog(builddir)

    total_p = total_f = total_s = 0
    rows = []
    failures = []
    used = set()

    for t in tests:
        name = t.get("name", "?")
        result = t.get("result", "?")
        jf = junit_file_for(t, junit_files)
        parsed = parse_junit(jf) if jf and os.path.exists(jf) else None
        if jf and os.path.exists(jf):
            used.add(os.path.realpath(jf))
        if parsed is None:
            if result in OK_RESULTS:
                p, f, s, names = 1, 0, 0, []
            elif result in SKIP_RESULTS:
                p, f, s, names = 0, 0, 1, []
            else:
                p, f, s, names = 0, 1, 0, ["%s (%s, no JUnit report)" % (name, result)]
        else:
            p, f, s, names = parsed
            if result not in OK_RESULTS and result not in SKIP_RESULTS and f == 0:
                # Every case passed but the process failed (crash at exit, sanitizer report,
                # timeout after the report was written): that is a failure too.
                f = 1
                names = ["%s (%s after its cases passed)" % (name, result)]
            if p + f + s == 0:
                # A runner that ran no case: count the meson result itself.
                if result in OK_RESULTS:
                    p = 1
                elif result in SKIP_RESULTS:
                    s = 1
                else:
                    f = 1
                    names = ["%s (%s, no test case ran)" % (name, result)]
        rows.append((name, result, p, f, s))
        failures.extend(names)
        total_p, total_f, total_s = total_p + p, total_f + f, total_s + s

    # JUnit files no meson test claimed (e.g. testlog.json missing): count them as they are.
    for jf in junit_files:
        if os.path.realpath(jf) in used:
            continue
        parsed = parse_junit(jf)
        name = os.path.basename(jf)
        if parsed is None:
            rows.append((name, "UNREADABLE", 0, 1, 0))
            failures.append("%s (unreadable JUnit file)" % name)
            total_f += 1
            continue
        p, f, s, names = parsed
        rows.append((name, "-", p, f, s))
        failures.extend(names)
        total_p, total_f, total_s = total_p + p, total_f + f, total_s + s

    if rows:
        width = max(len(r[0]) for r in rows)
        print("Test summary (%s):" % builddir)
        for name, result, p, f, s in rows:
            print("  %-*s %-10s %4d passed, %d failed%s" % (width, name, result, p, f,
                                                            ", %d skipped" % s if s else ""))
    else:
        print("Test summary (%s): no test results found" % builddir)
    if failures:
        print("Failed:")
        for n in failures:
            print("  - " + n)
    if total_p + total_f == 0:
        # Nothing ran: that is a failure of the test run itself, not a success.
        total_f = max(total_f, 1)
    # The last line is the plain `N passed, N failed` CI reads; skipped cases are told above it.
    if total_s:
        print("(%d skipped)" % total_s)
    print("%d passed, %d failed" % (total_p, total_f))
    return 1 if total_f else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
