"""Random command sequences for difftest.py. A sequence is a list of steps:
("cmd", args) on the main connection, ("side", args) on a second connection (to break
WATCHes), ("pipe", [args, ...]) sent in one write, ("scan", extra_args) a full SCAN
iteration, ("raw", bytes) malformed input (replies read until the server closes),
("sleep", seconds). Only commands whose replies are deterministic on both servers are
generated (README "Differences from Redis" lists what is left out and why)."""
import time

KEYS = [b"k1", b"k2", b"k3", b"n1", b"n2", b"f1", b"bin\x00\xff\r\nkey", b"{x}:y", b""]
INTS = [b"0", b"1", b"-1", b"10", b"9223372036854775807", b"-9223372036854775808",
        b"9223372036854775808", b"01", b" 1", b"1 ", b"+1", b"abc", b"", b"1.0", b"-0"]
FLOATS = [b"1.5", b"-0.25", b"3e2", b"1e-3", b"0.1", b"10", b"inf", b"-inf", b"nan", b"abc",
          b" 1.5", b"1.5 ", b"", b"5.0e3", b"0x10", b"1e400", b"-1e-400", b"17.99999999"]


def value(r):
    c = r.random()
    if c < 0.3:
        return r.choice(INTS)
    if c < 0.45:
        return r.choice(FLOATS)
    if c < 0.75:
        return bytes(r.choice(b"abcxyz") for _ in range(r.randint(0, 12)))
    if c < 0.97:
        return bytes(r.getrandbits(8) for _ in range(r.randint(0, 40)))
    return bytes(r.getrandbits(8) for _ in range(r.randint(100000, 1200000)))  # large


def key(r):
    return r.choice(KEYS)


def secs(r):
    return r.choice([b"100", b"1000", b"5000", b"0", b"-5", b"abc", b"9223372036854775807",
                     b"99999"])


def set_cmd(r):
    args = [b"SET", key(r), value(r)]
    opts = [[b"NX"], [b"XX"], [b"GET"], [b"KEEPTTL"], [b"EX", secs(r)],
            [b"PX", secs(r) + b"000"], [b"EXAT", str(int(time.time()) + 1000).encode()],
            [b"PXAT", str(int(time.time() * 1000) + 900000).encode()], [b"BOGUS"], [b"EX"]]
    for _ in range(r.choice([0, 0, 1, 1, 2, 3])):
        args += r.choice(opts)
    return args


def expire_cmd(r):
    name = r.choice([b"EXPIRE", b"PEXPIRE", b"EXPIREAT", b"PEXPIREAT"])
    now = time.time()
    if name == b"EXPIRE":
        t = r.choice([b"100", b"1000", b"-1", b"0", b"abc", b"9223372036854775807"])
    elif name == b"PEXPIRE":
        t = r.choice([b"100000", b"2000000", b"-1", b"0", b"9223372036854775807"])
    elif name == b"EXPIREAT":
        t = r.choice([str(int(now) + 500).encode(), str(int(now) + 5000).encode(), b"1", b"-3"])
    else:
        t = r.choice([str(int(now * 1000) + 700000).encode(), b"1", b"abc"])
    args = [name, key(r), t]
    for _ in range(r.choice([0, 0, 0, 1, 1, 2])):
        args.append(r.choice([b"NX", b"XX", b"GT", b"LT", b"nx", b"ZZ"]))
    return args


def getex_cmd(r):
    args = [b"GETEX", key(r)]
    opts = [[b"EX", secs(r)], [b"PX", b"100000"], [b"PERSIST"],
            [b"EXAT", str(int(time.time()) + 800).encode()], [b"PXAT", b"1"], [b"EX"],
            [b"KEEPTTL"]]
    for _ in range(r.choice([0, 1, 1, 2])):
        args += r.choice(opts)
    return args


def idx(r):
    return r.choice([b"0", b"1", b"-1", b"-2", b"3", b"100", b"-100", b"abc",
                     b"9223372036854775807", b"-9223372036854775808"])


BF_TYPES = [b"u1", b"u8", b"u13", b"u63", b"i1", b"i8", b"i32", b"i63", b"i64", b"u64", b"x8"]
BF_VALUES = [b"0", b"1", b"-1", b"127", b"128", b"255", b"-129", b"9223372036854775807",
             b"-9223372036854775808", b"-4611686018427387905", b"x"]


def bitfield_cmd(r, k):
    """BITFIELD or BITFIELD_RO with a few random subcommands (bad ones included)."""
    args = [r.choice([b"BITFIELD", b"BITFIELD_RO"]), k]
    for _ in range(r.randint(0, 4)):
        sub = r.choice([b"GET", b"SET", b"INCRBY", b"OVERFLOW", b"BOGUS"])
        args.append(sub)
        if sub in (b"GET", b"SET", b"INCRBY"):
            args += [r.choice(BF_TYPES), r.choice([b"0", b"5", b"64", b"#2", b"-1"])]
        if sub in (b"SET", b"INCRBY"):
            args.append(r.choice(BF_VALUES))
        if sub == b"OVERFLOW":
            args.append(r.choice([b"WRAP", b"SAT", b"fail", b"nope"]))
    return args


def simple_cmd(r):
    """One random command (args list)."""
    k = key(r)
    table = [
        lambda: set_cmd(r),
        lambda: set_cmd(r),
        lambda: [b"GET", k],
        lambda: [b"GET", k],
        lambda: [b"SETNX", k, value(r)],
        lambda: [b"SETEX", k, secs(r), value(r)],
        lambda: [b"PSETEX", k, secs(r) + b"000", value(r)],
        lambda: [b"GETSET", k, value(r)],
        lambda: [b"MGET"] + [key(r) for _ in range(r.randint(1, 4))],
        lambda: [b"MSET"] + sum(([key(r), value(r)] for _ in range(r.randint(1, 3))), []),
        lambda: [b"MSETNX"] + sum(([key(r), value(r)] for _ in range(r.randint(1, 3))), []),
        lambda: [b"MSET", k],
        lambda: [b"STRLEN", k],
        lambda: [b"APPEND", k, value(r)],
        lambda: [b"SETRANGE", k, r.choice([b"0", b"3", b"20", b"-1", b"536870912", b"x"]),
                 value(r)],
        lambda: [r.choice([b"GETRANGE", b"SUBSTR"]), k, idx(r), idx(r)],
        lambda: [b"INCR", k],
        lambda: [b"DECR", k],
        lambda: [b"INCRBY", k, r.choice(INTS)],
        lambda: [b"DECRBY", k, r.choice(INTS)],
        lambda: [b"INCRBYFLOAT", k, r.choice(FLOATS + INTS)],
        lambda: [b"GETDEL", k],
        lambda: getex_cmd(r),
        lambda: [r.choice([b"DEL", b"UNLINK"])] + [key(r) for _ in range(r.randint(1, 3))],
        lambda: [b"EXISTS"] + [key(r) for _ in range(r.randint(1, 4))],
        lambda: [b"TOUCH"] + [key(r) for _ in range(r.randint(1, 3))],
        lambda: [b"TYPE", k],
        lambda: [r.choice([b"RENAME", b"RENAMENX"]), k, key(r)],
        lambda: [b"COPY", k, key(r)] + r.choice([[], [b"REPLACE"], [b"DB", b"0"], [b"BOGUS"]]),
        lambda: expire_cmd(r),
        lambda: expire_cmd(r),
        lambda: [r.choice([b"TTL", b"PTTL", b"EXPIRETIME", b"PEXPIRETIME"]), k],
        lambda: [b"PERSIST", k],
        lambda: [b"PING"] + r.choice([[], [value(r)], [b"a", b"b"]]),
        lambda: [b"ECHO", value(r)],
        lambda: [b"DBSIZE"],
        lambda: [b"EXISTS"],
        lambda: [r.choice([b"FOO", b"get2", b"SETX"]), k],
        lambda: [b"GET", k, k],
        lambda: [b"INCR"],
        lambda: [b"SELECT", r.choice([b"0", b"abc"])],
        lambda: [b"KEYS", r.choice([b"*", b"k*", b"?1", b"[kn]1", b"nomatch", b"bin\x00*",
                                    b"\\{x}*", b"k\\1"])],
        lambda: [b"RANDOMKEY"],
        lambda: [b"CONFIG", b"GET", r.choice([b"maxmemory", b"appendonly", b"save",
                                             b"nosuch"])],
        lambda: [b"UNWATCH"],
        lambda: [b"SETBIT", k, r.choice([b"0", b"7", b"100", b"-1", b"x"]), r.choice([b"0", b"1"])],
        lambda: [b"GETBIT", k, r.choice([b"0", b"7", b"100"])],
        lambda: [b"BITCOUNT", k] + r.choice([[], [idx(r), idx(r)],
                                             [idx(r), idx(r), r.choice([b"BIT", b"byte", b"x"])],
                                             [idx(r)]]),
        lambda: [b"BITPOS", k, r.choice([b"0", b"1", b"2"])] +
        r.choice([[], [idx(r)], [idx(r), idx(r)], [idx(r), idx(r), r.choice([b"bit", b"BYTE"])]]),
        lambda: [b"BITOP", r.choice([b"AND", b"or", b"XOR", b"NOT", b"NAND"]), key(r)] +
        [key(r) for _ in range(r.randint(1, 3))],
        lambda: bitfield_cmd(r, k),
    ]
    return table[r.randint(0, len(table) - 1)]()


def multi_block(r):
    """MULTI ... EXEC/DISCARD, sometimes with a WATCH broken from the side connection."""
    steps = []
    watched = []
    if r.random() < 0.5:
        watched = [key(r) for _ in range(r.randint(1, 2))]
        steps.append(("cmd", [b"WATCH"] + watched))
        if r.random() < 0.5:
            steps.append(("side", r.choice([[b"SET", watched[0], b"side"], [b"GET", watched[0]],
                                            [b"DEL", watched[0]]])))
    steps.append(("cmd", [b"MULTI"]))
    for _ in range(r.randint(0, 4)):
        c = simple_cmd(r)
        if c[0] in (b"TTL", b"PTTL", b"EXPIRETIME", b"PEXPIRETIME", b"RANDOMKEY", b"KEYS"):
            c = [b"GET", key(r)]
        steps.append(("cmd", c))
    if r.random() < 0.15:
        steps.append(("cmd", r.choice([[b"MULTI"], [b"WATCH", b"k1"], [b"GET"], [b"NOSUCH"]])))
    steps.append(("cmd", [b"DISCARD"] if r.random() < 0.15 else [b"EXEC"]))
    return steps


MALFORMED = [
    b"*abc\r\n", b"*1\r\n$abc\r\n", b"*1\r\nfoo\r\n", b"*2\r\n$3\r\nGET\r\n$-5\r\n",
    b'SET "a\r\n', b"*1\r\n$600000000\r\n", b"*3000000\r\n", b"$3\r\nGET\r\n",
    b"PING\r\n*1\r\n$4\r\nPING\r\n*x\r\n", b"*1\r\n$4\r\nPINGxx\r\n",
    b"SET 'a b' c\r\nGET 'a b'\r\n", b"\r\n\r\nPING\r\n", b"ECHO \"a\\x41\\n\"\r\n",
]


def sequence(r, nsteps):
    """A random sequence of about nsteps steps."""
    steps = []
    if r.random() < 0.4:
        steps.append(("cmd", [b"HELLO", b"3"]))
    while len(steps) < nsteps:
        c = r.random()
        if c < 0.70:
            steps.append(("cmd", simple_cmd(r)))
        elif c < 0.82:
            steps.extend(multi_block(r))
        elif c < 0.92:
            steps.append(("pipe", [simple_cmd(r) for _ in range(r.randint(2, 30))]))
        elif c < 0.96:
            steps.append(("scan", r.choice([[], [b"COUNT", b"3"], [b"MATCH", b"k*"],
                                            [b"TYPE", b"string"], [b"TYPE", b"list"],
                                            [b"MATCH", b"n*", b"COUNT", b"1"],
                                            [b"MATCH", b"k[12]"], [b"MATCH", b"\\{x}*"],
                                            [b"MATCH", b"zz*"]])))
        elif c < 0.98:
            steps.append(("cmd", [b"HELLO", r.choice([b"2", b"3"])]))
        else:
            steps.append(("raw", r.choice(MALFORMED)))
    return steps


def fixed_sequence():
    """Edge cases always run once: protocol versions, AUTH, transactions' error paths."""
    s = [("cmd", a) for a in [
        [b"HELLO", b"4"], [b"HELLO", b"x"], [b"HELLO", b"3", b"SETNAME", b"n1"],
        [b"HELLO", b"3", b"BOGUS"], [b"GET", b"nokey"], [b"MGET", b"a", b"b"],
        [b"CONFIG", b"GET", b"maxmemory"], [b"INCRBYFLOAT", b"f", b"1.5"], [b"HELLO", b"2"],
        [b"AUTH", b"x"], [b"AUTH", b"default", b"x"], [b"AUTH", b"nouser", b"x"],
        [b"EXEC"], [b"DISCARD"], [b"MULTI"], [b"MULTI"], [b"SET", b"a", b"1"], [b"EXEC"],
        [b"MULTI"], [b"GET"], [b"SET", b"a", b"2"], [b"EXEC"], [b"GET", b"a"],
        [b"WATCH", b"a"], [b"MULTI"], [b"WATCH", b"b"], [b"INCR", b"a"], [b"EXEC"],
        [b"SET", b"n", b"9223372036854775807"], [b"INCR", b"n"], [b"DECRBY", b"n",
                                                                   b"-9223372036854775808"],
        [b"SET", b"f", b"1.5"], [b"INCRBYFLOAT", b"f", b"inf"], [b"INCRBYFLOAT", b"f", b"0.1"],
        [b"SETRANGE", b"nope", b"5", b""], [b"SETRANGE", b"s", b"3", b"abc"], [b"GET", b"s"],
        [b"RENAME", b"nope", b"x"], [b"RENAME", b"s", b"s"], [b"RENAMENX", b"s", b"s"],
        [b"COPY", b"s", b"s"], [b"EXPIRE", b"s", b"10", b"NX", b"XX"],
        [b"EXPIRE", b"s", b"10", b"GT", b"LT"], [b"EXPIRE", b"s", b"10", b"FOO"],
        [b"SET", b"t", b"v", b"EX", b"100"], [b"EXPIRE", b"t", b"50", b"GT"],
        [b"EXPIRE", b"t", b"500", b"GT"], [b"PERSIST", b"t"], [b"PERSIST", b"t"],
        [b"EXPIRE", b"t", b"-1"], [b"EXISTS", b"t"], [b"RESET"], [b"HELLO", b"3"],
        [b"RESET"], [b"CLIENT", b"NO-EVICT", b"on"], [b"CLIENT", b"NO-EVICT", b"maybe"],
        [b"SET", b"big", b"x" * 3000000], [b"STRLEN", b"big"], [b"APPEND", b"big", b"yz"],
        [b"GETRANGE", b"big", b"-3", b"-1"],
    ]]
    s.append(("pipe", [[b"SET", b"p%d" % i, b"v%d" % i] for i in range(500)] +
              [[b"GET", b"p%d" % i] for i in range(500)]))
    s.append(("raw", b"*1\r\n$4\r\nPING\r\n*1\r\n$-1\r\n"))
    return s
