"""Debian's prometheus-redis-exporter against a dmkv gateway (issue 13): per-command series
(calls, duration, latency percentiles, subcommands like "client|setname"), the key count,
clients and the slowlog come out of /metrics, and the exporter logs no error (no unknown
command: it asks INFO ALL, CONFIG GET, SLOWLOG, LATENCY LATEST, CLIENT SETNAME, ...).

Exit status: 0 passed, 1 failed, 77 the exporter is not installed (scripts/install-deps.sh
installs it). Environment: DMKV_MEMNODE, DMKV_GATEWAY (set by ctest)."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import dmkvprocs


def send(port, *args):
    """One RESP command on a fresh connection; returns the raw reply bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        req = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
        s.sendall(req)
        return s.recv(65536)


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        return r.read().decode()


def metric(text, name, labels=""):
    """The value of `name{labels}` (labels as printed, without braces) or None."""
    pat = "^" + re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)$"
    m = re.search(pat, text, re.M)
    return float(m.group(1)) if m else None


def main():
    exe = shutil.which("prometheus-redis-exporter") or shutil.which("redis_exporter")
    if not exe:
        print("SKIP: prometheus-redis-exporter not installed (scripts/install-deps.sh)")
        return 77
    mn = dmkvprocs.start_memnode()
    gw = dmkvprocs.start_gateway([mn.uri], threads=2)
    web = dmkvprocs.free_port()
    log = os.path.join(dmkvprocs.LOGDIR, "exporter.log")
    exp = subprocess.Popen([exe, "--redis.addr=redis://127.0.0.1:%d" % gw.port,
                            "--web.listen-address=127.0.0.1:%d" % web],
                           stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    ok = True
    try:
        if not dmkvprocs.wait_port(web):
            raise RuntimeError("the exporter did not listen")
        for i in range(25):
            assert send(gw.port, "SET", "exp:%d" % i, "v" * i) == b"+OK\r\n"
        send(gw.port, "GET", "exp:1")
        send(gw.port, "CONFIG", "SET", "slowlog-log-slower-than", "0")
        send(gw.port, "GET", "exp:2")  # a slowlog entry
        text = scrape(web)
        text = scrape(web)  # the second scrape sees the first one's own commands too
        checks = [
            ("redis_up", "", lambda v: v == 1),
            ("redis_db_keys", 'db="db0"', lambda v: v == 25),
            ("redis_commands_total", 'cmd="set"', lambda v: v >= 25),
            ("redis_commands_duration_seconds_total", 'cmd="set"', lambda v: v > 0),
            ("redis_commands_total", 'cmd="info"', lambda v: v >= 1),
            ("redis_commands_total", 'cmd="config|get"', lambda v: v >= 1),
            ("redis_latency_percentiles_usec_count", 'cmd="set"', lambda v: v >= 25),
            ("redis_connected_clients", "", lambda v: v >= 1),
            ("redis_slowlog_length", "", lambda v: v >= 1),
            ("redis_exporter_last_scrape_error", 'err=""', lambda v: v == 0),
        ]
        for name, labels, good in checks:
            v = metric(text, name, labels)
            if v is None or not good(v):
                ok = False
                print("FAIL %s{%s} = %s" % (name, labels, v))
            else:
                print("ok   %s{%s} = %g" % (name, labels, v))
        time.sleep(0.5)
    except Exception as e:  # noqa: BLE001 - report and fail
        ok = False
        print("FAIL: %s" % e)
    finally:
        exp.terminate()
        exp.wait(10)
        alive = gw.alive()
        gw.stop()
        mn.stop()
    out = open(log, errors="replace").read()
    bad = [l for l in out.splitlines() if re.search(r"level=(error|warning)|unknown command", l)]
    if bad:
        ok = False
        print("exporter log:\n" + "\n".join(bad))
    if not alive:
        ok = False
        print("the gateway died; its log:\n" + gw.tail())
    print("PASS" if ok else "logs in " + dmkvprocs.LOGDIR)
    if ok:
        shutil.rmtree(dmkvprocs.LOGDIR, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
