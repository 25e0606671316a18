#!/usr/bin/env python3
"""Client matrix: real client libraries against dmkv (a memory node + gateway started here):
hiredis (C, RESP2), redis-py (Debian's python3-redis, RESP2), node-redis v5 (RESP2 and
RESP3), node-redis v4 (RESP2; it keeps the SCAN cursor as a JavaScript number) and ioredis
(RESP2) from npm, installed into clients/node_modules from the committed
package.json. Each does connect, set/get, pipeline, transaction, scan iteration, expiry.
The Node clients are skipped with a message when npm or its registry is unreachable.

Usage: clients.py <hiredis_client binary>. Needs DMKV_MEMNODE and DMKV_GATEWAY."""
import os
import shutil
import subprocess
import sys

import dmkvprocs

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.join(HERE, "clients")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def npm_install():
    """True when node_modules holds the pinned packages (installing them if needed)."""
    if not shutil.which("node") or not shutil.which("npm"):
        print("SKIP node clients: node/npm not installed")
        return False
    if all(os.path.isdir(os.path.join(CLIENTS, "node_modules", m))
           for m in ("ioredis", "redis", "redis4")):
        return True
    try:
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=CLIENTS, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        print("SKIP node clients: npm install timed out (registry unreachable?)")
        return False
    if r.returncode != 0:
        print("SKIP node clients: npm install failed (registry unreachable?):\n" +
              r.stderr[-2000:])
        return False
    return True


def main():
    hiredis_bin = sys.argv[1]
    mn = dmkvprocs.start_memnode()
    gw = dmkvprocs.start_gateway([mn.uri], threads=2)
    port = str(gw.port)
    runs = [("hiredis", [hiredis_bin, port], None),
            ("redis-py", [PY, os.path.join(CLIENTS, "pyredis_client.py"), port], None)]
    if npm_install():
        for lib, proto in (("node-redis", "2"), ("node-redis", "3"), ("node-redis4", "2"),
                           ("ioredis", "2")):
            runs.append((lib + " RESP" + proto,
                         ["node", os.path.join(CLIENTS, "node_client.mjs"), port, lib, proto],
                         CLIENTS))
    failed = []
    try:
        for name, argv, cwd in runs:
            r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
            out = (r.stdout + r.stderr).strip()
            print("%-16s %s" % (name, "ok" if r.returncode == 0 else "FAILED"))
            if r.returncode != 0:
                print(out[-3000:])
                failed.append(name)
        if not gw.alive():
            print("gateway died:\n" + gw.tail())
            failed.append("gateway")
    finally:
        gw.stop()
        mn.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
