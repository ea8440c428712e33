#!/usr/bin/env python3
"""Checks the include graph of src/ at build time: no cycle between modules, and only the
gateway's own files reach the route table.

usage: includecheck.py ROOT [--stamp FILE] [--graph]

A module is a header and the source of the same name: include/<layer>/omnigate/<path>.h with
src/<layer>/<path>.c (or a private header beside its sources, such as src/data/db/db_int.h).
Module A depends on module B when a file of A includes B's header. Any cycle in that graph fails
the build with the cycle spelled out, as does an include of omnigate/app/gateway.h (the route
table, which knows every feature) from anywhere but the gateway itself and src/main.c: a
feature that includes it would include every other feature.

The layers (include directories per layer, src/meson.build) already refuse an upward include
and the layercheck programs an upward call; this check is the same rule inside a layer.
--graph prints the module graph (one "module: dependencies" line each) instead of checking.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LAYERS = ("base", "net", "data", "product")
# Only these files may include the route table.
GATEWAY_HEADER = "omnigate/app/gateway.h"
GATEWAY_USERS = {"src/main.c", "src/product/app/gateway.c"}


def module_of(rel):
    """The module name of a repository-relative file, or None for a file of no module."""
    rel = rel.replace(os.sep, "/")
    m = re.match(r"include/(%s)/omnigate/(.+)\.h$" % "|".join(LAYERS), rel)
    if m:
        return "%s/%s" % (m.group(1), m.group(2))
    m = re.match(r"src/(%s)/(.+)\.[ch]$" % "|".join(LAYERS), rel)
    if m:
        return "%s/%s" % (m.group(1), m.group(2))
    if rel == "src/main.c":
        return "main"
    return None


def resolve(root, rel, target):
    """The repository-relative path of the header `target` included by file `rel`, or None for
    a header outside the tree (a system or generated one)."""
    here = os.path.dirname(rel)
    cand = os.path.normpath(os.path.join(here, target))
    if os.path.isfile(os.path.join(root, cand)):
        return cand
    if target.startswith("omnigate/"):
        for layer in LAYERS:
            cand = os.path.join("include", layer, target)
            if os.path.isfile(os.path.join(root, cand)):
                return cand
    return None


def scan(root):
    """(graph, problems): module -> set of modules it includes, and rule breaches."""
    graph, problems = {}, []
    for top in ("src", "include"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(d, name), root)
                mod = module_of(rel)
                if mod is None:
                    continue
                deps = graph.setdefault(mod, set())
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    if target == GATEWAY_HEADER and rel.replace(os.sep, "/") not in GATEWAY_USERS:
                        problems.append("%s includes %s: only the gateway and main.c know every feature "
                                        "(include omnigate/app/ctx.h for the app context)" % (rel, target))
                    hdr = resolve(root, rel, target)
                    dep = module_of(hdr) if hdr else None
                    if dep is not None and dep != mod:
                        deps.add(dep)
    return graph, problems


def cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def cycle_path(graph, comp):
    """One cycle through the first module of a component, as a list of modules."""
    start, members = comp[0], set(comp)
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                todo.append(w)
    return comp


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) < 1:
        sys.exit(__doc__)
    root = args[0]
    graph, problems = scan(root)
    if "--graph" in argv:
        for mod in sorted(graph):
            print("%s: %s" % (mod, " ".join(sorted(graph[mod]))))
        return 0
    for comp in cycles(graph):
        problems.append("include cycle: " + " -> ".join(cycle_path(graph, comp)))
    if problems:
        for p in problems:
            print("includecheck: " + p, file=sys.stderr)
        return 1
    if "--stamp" in argv:
        stamp = argv[argv.index("--stamp") + 1]
        with open(stamp, "w") as f:
            f.write("%d modules, no cycle\n" % len(graph))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
