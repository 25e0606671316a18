"""Client matrix, Python: redis-py (Debian's python3-redis, RESP2: version 4.x has no
RESP3). Usage: pyredis_client.py <port>. Exits 0 when every check passed."""
import os
import sys
import time

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port)
assert r.ping()
assert r.set("py:k", b"v\x00bin")
assert r.get("py:k") == b"v\x00bin"
assert r.get("py:missing") is None
p = r.pipeline(transaction=False)
p.set("py:a", 1).incr("py:a").get("py:a")
assert p.execute() == [True, 2, b"2"]
p = r.pipeline()  # MULTI/EXEC
p.set("py:b", "x").incrbyfloat("py:f", 1.5).get("py:b")
assert p.execute() == [True, 1.5, b"x"]
with r.pipeline() as p:  # WATCH-based optimistic transaction
    p.watch("py:b")
    v = p.get("py:b")
    p.multi()
    p.set("py:b", v + b"y")
    p.execute()
assert r.get("py:b") == b"xy"
for i in range(50):
    r.set("py:s%d" % i, i)
assert len(set(r.scan_iter(match="py:s*", count=20))) == 50
big = int(os.environ.get("DMKV_BIG", "0"))  # big:* keys loaded by clients.py
if big:
    assert len(set(r.scan_iter(match="big:*", count=1000))) == big
    cursor, keys = 0, set()
    while True:  # the cursors themselves: below 2^53
        cursor, page = r.scan(cursor, match="big:*", count=1000)
        assert 0 <= cursor < 2**53, cursor
        keys.update(page)
        if cursor == 0:
            break
    assert len(keys) == big
r.set("py:e", "x", ex=100)
assert 90 < r.ttl("py:e") <= 100
r.pexpire("py:e", 50)
time.sleep(0.12)
assert r.get("py:e") is None
assert "redis_version" in r.info()
print("redis-py %s RESP2: ok" % redis.__version__)
