#!/usr/bin/env python3
"""Client matrix: real client libraries against dmkv (a memory node + gateway started here):
hiredis (C, RESP2), redis-py (Debian's python3-redis, RESP2), node-redis v5 (RESP2 and
RESP3), node-redis v4 (RESP2; it keeps the SCAN cursor as a JavaScript number) and ioredis
(RESP2) from npm, installed into clients/node_modules from the committed
package.json. Each does connect, set/get, pipeline, transaction, scan iteration, expiry,
and iterates a 100,000-key SCAN with its own iterator to the exact key set (node-redis v4
breaks on a cursor of 2^53 or more; hiredis, redis-py and node-redis v5 check every cursor).
The Node clients are skipped with a message when npm or its registry is unreachable.

Usage: clients.py <hiredis_client binary>. Needs DMKV_MEMNODE and DMKV_GATEWAY."""
import os
import shutil
import socket
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


BIG = 100000  # keys every client iterates with SCAN (issue 13: cursors below 2^53)


def load_big(port):
    """SET big:000000 .. big:<BIG-1> through one pipelined connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        for start in range(0, BIG, 5000):
            cmds = b"".join(b"*3\r\n$3\r\nSET\r\n$10\r\nbig:%06d\r\n$1\r\nx\r\n" % i
                            for i in range(start, min(BIG, start + 5000)))
            s.sendall(cmds)
            want, got = 5 * min(5000, BIG - start), b""
            while len(got) < want:  # "+OK\r\n" each
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise RuntimeError("gateway closed the connection while loading")
                got += chunk
            if got != b"+OK\r\n" * (want // 5):
                raise RuntimeError("load failed: %r" % got[:200])


def main():
    hiredis_bin = sys.argv[1]
    mn = dmkvprocs.start_memnode()
    gw = dmkvprocs.start_gateway([mn.uri], threads=2)
    port = str(gw.port)
    load_big(gw.port)
    os.environ["DMKV_BIG"] = str(BIG)
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
