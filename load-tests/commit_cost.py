#!/usr/bin/env python3
"""Where Redis's CPU per chat goes: the commit script's two runs per chat
(the session's creation with its turn's start, and the turn's end), replayed
from a real chat, and the cost of the structures a chat creates.

Standard library only; talks RESP to a private redis-server (never the
shared one: it runs FLUSHALL and CONFIG RESETSTAT).

  redis-server --port 6391 --save "" --appendonly no --daemonize yes
  # one real chat's commands, captured while a few chats run:
  timeout 25 redis-cli -p 6391 monitor > /tmp/monitor.txt &
  GATEWAY_BIN=target/release/switchboard ./target/release/overhead \\
      --redis redis://127.0.0.1:6391 --sustain 3 --streams 3 --dialects llm-gateway
  python3 load-tests/commit_cost.py 6391 /tmp/monitor.txt

For each variant of `src/store/lua/commit.lua` (the script, and the script
cut short at each of its steps) it replays N creations, then each session's
streamed appends (plain XADDs, as the writer sends them) and its end, 20
per round trip, and prints Redis's microseconds per call of each from
`INFO commandstats`. Then the same structures made by single commands and
by a one-command script, for comparison.
"""

import re
import socket
import sys
import uuid

SCRIPT = "src/store/lua/commit.lua"
N = 3000
BATCH = 20
# Where the script is cut short, after each of its steps.
CUTS = [
    ("invocation only", None),
    ("+ fence reads (HMGET, XREVRANGE)", "local nev = tonumber(ARGV[12])"),
    ("+ messages (RPUSH)", "-- A new tenure fences"),
    ("+ events (XADD)", "local fields = {'own', own"),
    ("+ state (HSET)", "for _ = 1, nclose do"),
    ("whole script (+ PEXPIRE)", ""),
]


def parse(line):
    """The arguments of one MONITOR line (redis-cli's quoting undone)."""
    args = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', line[line.index('"'):]):
        raw, out, j = m.group(1), bytearray(), 0
        while j < len(raw):
            if raw[j] == "\\":
                n = raw[j + 1]
                if n == "x":
                    out.append(int(raw[j + 2 : j + 4], 16))
                    j += 4
                    continue
                out += {"n": b"\n", "r": b"\r", "t": b"\t", '"': b'"', "\\": b"\\"}.get(n, n.encode())
                j += 2
                continue
            out += raw[j].encode()
            j += 1
        args.append(bytes(out))
    return args


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += [b"$%d\r\n" % len(a), a, b"\r\n"]
    return b"".join(out)


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def read(self):
        line = self.file.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in b"+-:":
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        return [self.read() for _ in range(max(int(rest), 0))]

    def cmd(self, *args):
        self.sock.sendall(encode(args))
        return self.read()

    def pipe(self, cmds):
        self.sock.sendall(b"".join(encode(c) for c in cmds))
        return [self.read() for _ in cmds]

    def usec(self, name):
        stats = self.cmd("INFO", "commandstats").decode()
        m = re.search(r"cmdstat_%s:calls=(\d+),usec=(\d+)" % name, stats)
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def replay(r, script, create, end):
    """Creations, then appends and ends; µs per call of each."""
    sha = r.cmd("SCRIPT", "LOAD", script)
    r.cmd("FLUSHALL")
    r.cmd("CONFIG", "RESETSTAT")
    create, end = list(create), list(end)
    create[1] = end[1] = sha
    sid = re.search(rb"s:([0-9a-f-]{36})", create[3]).group(1)
    ids = [uuid.uuid4().hex.encode() for _ in range(N)]
    for k in range(0, N, BATCH):
        r.pipe([[a.replace(sid, i) for a in create] for i in ids[k : k + BATCH]])
    created = r.usec("evalsha")
    written_up_to = int(end[9])
    answers = []
    for k in range(0, N, BATCH):
        appends = []
        for i in ids[k : k + BATCH]:
            key = create[5].replace(sid, i)
            for seq in range(2, written_up_to + 1):
                text = b'{"type":"text_delta","text":" t%d","agent_id":"main","depth":0}' % seq
                appends.append([b"XADD", key, b"NOMKSTREAM", b"MAXLEN", b"10000", b"1-%d" % seq, b"e", text])
        r.pipe(appends)
        answers += r.pipe([[a.replace(sid, i) for a in end] for i in ids[k : k + BATCH]])
    ended = r.usec("evalsha")
    per = lambda calls, usec: usec / calls if calls else 0.0
    # A script cut before its state write leaves no session: the ends are
    # then refused by the fence, and their cost is not the end's.
    whole = all(isinstance(a, list) and a[0] == b"ok" for a in answers)
    return per(*created), per(ended[0] - created[0], ended[1] - created[1]) if whole else None


def structures(r):
    big = b"x" * 800
    r.cmd("FLUSHALL")
    empty = r.cmd("SCRIPT", "LOAD", "return 1")
    xadd = r.cmd("SCRIPT", "LOAD", "redis.call('XADD', KEYS[1], 'MAXLEN', '10000', '1-1', 'e', ARGV[1]) return 1")
    hset = r.cmd(
        "SCRIPT", "LOAD", "redis.call('HSET', KEYS[1], 'own', 'a', 'ep', 1, 'seq', 1, 'doc', ARGV[1]) return 1"
    )
    cases = [
        ("XADD making a stream (150 B)", "xadd", lambda i: [b"XADD", b"a:%d" % i, b"MAXLEN", b"10000", b"1-1", b"e", big[:150]]),
        ("XADD to that stream (150 B)", "xadd", lambda i: [b"XADD", b"a:%d" % i, b"MAXLEN", b"10000", b"1-2", b"e", big[:150]]),
        ("XADD making a stream (800 B)", "xadd", lambda i: [b"XADD", b"b:%d" % i, b"MAXLEN", b"10000", b"1-1", b"e", big]),
        ("HSET making a hash, short values", "hset", lambda i: [b"HSET", b"c:%d" % i, b"own", b"a", b"ep", b"1", b"seq", b"1"]),
        ("HSET making a hash, an 800 B value", "hset", lambda i: [b"HSET", b"d:%d" % i, b"own", b"a", b"doc", big]),
        ("RPUSH making a list", "rpush", lambda i: [b"RPUSH", b"e:%d" % i, big[:80]]),
        ("PEXPIRE", "pexpire", lambda i: [b"PEXPIRE", b"d:%d" % i, b"86400000"]),
        ("a script of nothing", "evalsha", lambda i: [b"EVALSHA", empty, b"1", b"f:%d" % i, big]),
        ("a script of one XADD making a stream", "evalsha", lambda i: [b"EVALSHA", xadd, b"1", b"g:%d" % i, big]),
        ("a script of one HSET making a hash", "evalsha", lambda i: [b"EVALSHA", hset, b"1", b"h:%d" % i, big]),
    ]
    for label, name, make in cases:
        r.cmd("CONFIG", "RESETSTAT")
        for k in range(0, N, BATCH):
            r.pipe([make(i) for i in range(k, min(k + BATCH, N))])
        calls, usec = r.usec(name)
        print(f"| {label} | {usec / calls:.2f} |")


def main():
    port, monitor = int(sys.argv[1]), sys.argv[2]
    lines = [l for l in open(monitor) if '"EVALSHA"' in l and "lua]" not in l and ":state" in l]
    create = parse(next(l for l in lines if '"absent"' in l))
    end = parse(next(l for l in lines if '"release"' in l))
    script = open(SCRIPT).read()
    r = Redis(port)
    print("| commit script | creation µs/call | turn's end µs/call |\n|---|---:|---:|")
    for label, cut in CUTS:
        if cut is None:
            variant = "if true then return {'ok'} end\n" + script
        elif cut:
            i = script.index(cut)
            variant = script[:i] + "if true then return {'ok'} end\n" + script[i:]
        else:
            variant = script
        created, ended = replay(r, variant, create, end)
        shown = f"{ended:.1f}" if ended is not None else "(no session: fenced)"
        print(f"| {label} | {created:.1f} | {shown} |")
    print("\n| structure | µs/call |\n|---|---:|")
    structures(r)


if __name__ == "__main__":
    main()
