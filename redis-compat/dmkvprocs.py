"""Process control for the redis-compat tests: start redis-server, dmkv-memnode and
dmkv-gateway on free 127.0.0.1 ports, wait until they accept connections, stop them.

Binaries come from the environment: DMKV_MEMNODE, DMKV_GATEWAY (set by ctest) and
REDIS_SERVER (default: redis-server on PATH). Logs go to files under a temp directory."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

LOGDIR = tempfile.mkdtemp(prefix="dmkv-compat-")


def free_port():
    """A TCP port on 127.0.0.1 that is free right now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30.0):
    """True once 127.0.0.1:port accepts a connection, False after timeout seconds."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Proc:
    """One child process listening on self.port; stop() terminates it."""

    def __init__(self, name, argv, port):
        self.name, self.port = name, port
        self.log = os.path.join(LOGDIR, "%s-%d.log" % (name, port))
        self.p = subprocess.Popen(argv, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        if not wait_port(port):
            self.stop()
            raise RuntimeError("%s did not start; log %s:\n%s" % (name, self.log, self.tail()))

    def tail(self, n=30):
        try:
            return "".join(open(self.log, errors="replace").readlines()[-n:])
        except OSError:
            return ""

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def start_redis():
    """Debian's redis-server without persistence on a free port (None if not installed)."""
    exe = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not exe:
        return None
    port = free_port()
    return Proc("redis", [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--daemonize", "no"], port)


def start_memnode(size="256m"):
    """A dmkv memory node; its URI is "tcp://127.0.0.1:<port>"."""
    port = free_port()
    p = Proc("memnode", [os.environ["DMKV_MEMNODE"], "--port", str(port), "--size", size], port)
    p.uri = "tcp://127.0.0.1:%d" % port
    return p


def start_gateway(uris, threads=1):
    """A dmkv gateway on the given memory-node URIs."""
    port = free_port()
    argv = [os.environ["DMKV_GATEWAY"], "--port", str(port), "--bind", "127.0.0.1",
            "--threads", str(threads)]
    for u in uris:
        argv += ["--memnode", u]
    return Proc("gateway", argv, port)
