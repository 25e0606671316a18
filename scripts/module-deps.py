#!/usr/bin/env python3
"""Module graph of dmcore/ (one module per folder) and its circles (issue 14: none allowed).

A module depends on another when one of its files includes a public header (dmkv/x.h) that
the other implements: the folder of the .c file whose first include is dmkv/x.h, or for
headers without such a file (race.h, chime.h, kv.h), the folder named in OWNERS below.
dmkv/index.h is an interface with no code: including it depends on no module.
Prints "module -> modules" lines; exits 1 when a circle exists, naming its edges."""
import collections
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dmcore")
OWNERS = {"race": "race", "chime": "chime", "kv": "kv", "rebuild": "kv", "index": None}
INCLUDE = re.compile(r'#include "dmkv/(\w+)\.h"')


def main():
    owner = dict(OWNERS)
    for c in glob.glob(os.path.join(ROOT, "*", "*.c")):
        with open(c) as f:
            for line in f:
                if line.startswith("#include"):
                    m = INCLUDE.match(line)
                    if m and m.group(1) not in owner:
                        owner[m.group(1)] = os.path.basename(os.path.dirname(c))
                    break
    deps, why = collections.defaultdict(set), collections.defaultdict(list)
    for path in glob.glob(os.path.join(ROOT, "*", "*.[ch]")):
        mod = os.path.basename(os.path.dirname(path))
        with open(path) as f:
            for line in f:
                m = INCLUDE.match(line)
                dep = owner.get(m.group(1)) if m else None
                if dep and dep != mod:
                    deps[mod].add(dep)
                    why[(mod, dep)].append(f"{os.path.relpath(path, ROOT)} includes {m.group(1)}.h")

    def reaches(a, b):
        seen, stack = set(), [a]
        while stack:
            for n in deps[stack.pop()]:
                if n == b:
                    return True
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return False

    for mod in sorted(deps):
        print(f"{mod} -> {', '.join(sorted(deps[mod]))}")
    circles = [(a, b) for a in sorted(deps) for b in sorted(deps[a]) if reaches(b, a)]
    for a, b in circles:
        print(f"CIRCLE: {a} -> {b} ({'; '.join(why[(a, b)][:3])})")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
