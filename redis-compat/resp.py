"""A minimal raw RESP2/RESP3 client for byte-exact comparisons: commands are encoded as
multibulk, and read_reply() returns the exact bytes of one complete reply (parsing only
enough to find where it ends), so two servers' replies can be compared byte for byte."""
import socket


def encode(args):
    """Multibulk encoding of a command (args: bytes or str)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """One TCP connection to 127.0.0.1:port."""

    def __init__(self, port, timeout=20.0):
        self.port = port
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.s.close()

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line_end(self, pos):
        while True:
            i = self.buf.find(b"\r\n", pos)
            if i >= 0:
                return i
            self._fill()

    def _skip(self, pos):
        """Position just past the reply that starts at pos."""
        end = self._line_end(pos)
        t, body = self.buf[pos:pos + 1], self.buf[pos + 1:end]
        pos = end + 2
        if t in (b"+", b"-", b":", b"_", b",", b"#", b"("):
            return pos
        if t in (b"$", b"=", b"!"):
            n = int(body)
            if n < 0:
                return pos
            while len(self.buf) < pos + n + 2:
                self._fill()
            return pos + n + 2
        if t in (b"*", b"~", b">", b"%", b"|"):
            n = int(body)
            if t in (b"%", b"|"):
                n *= 2
            for _ in range(max(n, 0)):
                pos = self._skip(pos)
            if t == b"|":  # an attribute precedes the real reply
                pos = self._skip(pos)
            return pos
        raise ValueError("bad reply type %r in %r" % (t, self.buf[:200]))

    def read_reply(self):
        """The raw bytes of the next reply. Raises EOFError when the server closed."""
        end = self._skip(0)
        r, self.buf = self.buf[:end], self.buf[end:]
        return r

    def call(self, *args):
        self.send(encode(args))
        return self.read_reply()


def parse(raw):
    """Decode raw reply bytes into Python values (for tolerant comparisons):
    ('int', n) / ('bulk', bytes) / ('str', bytes) / ('err', bytes) / ('null',) /
    ('agg', type, [items]) / ('other', type, bytes)."""
    val, _ = _parse(raw, 0)
    return val


def _parse(b, pos):
    end = b.index(b"\r\n", pos)
    t, body = b[pos:pos + 1], b[pos + 1:end]
    pos = end + 2
    if t == b":":
        return ("int", int(body)), pos
    if t in (b"+",):
        return ("str", body), pos
    if t == b"-":
        return ("err", body), pos
    if t == b"_":
        return ("null",), pos
    if t in (b"$", b"=", b"!"):
        n = int(body)
        if n < 0:
            return ("null",), pos
        return ("bulk", b[pos:pos + n]), pos + n + 2
    if t in (b"*", b"~", b">", b"%"):
        n = int(body)
        if n < 0:
            return ("null",), pos
        items = []
        for _ in range(n * (2 if t == b"%" else 1)):
            v, pos = _parse(b, pos)
            items.append(v)
        return ("agg", t, items), pos
    return ("other", t, body), pos
