"""Minimal raw AMQP 0-9-1 client for conformance probes that pika hides.

Only what compare.py needs: hand-built frames, the handshake, a frame reader and a
field-table decoder that keeps the wire type tags (so `l` vs `I`, `T` vs `l` are visible).
"""

import socket
import struct
import time

PROTO = b"AMQP\x00\x00\x09\x01"
FRAME_END = b"\xce"

METHODS = {
    (10, 10): "connection.start", (10, 11): "connection.start-ok",
    (10, 20): "connection.secure", (10, 21): "connection.secure-ok",
    (10, 30): "connection.tune", (10, 31): "connection.tune-ok",
    (10, 40): "connection.open", (10, 41): "connection.open-ok",
    (10, 50): "connection.close", (10, 51): "connection.close-ok",
    (10, 60): "connection.blocked", (10, 61): "connection.unblocked",
    (20, 10): "channel.open", (20, 11): "channel.open-ok",
    (20, 20): "channel.flow", (20, 21): "channel.flow-ok",
    (20, 40): "channel.close", (20, 41): "channel.close-ok",
    (40, 10): "exchange.declare", (40, 11): "exchange.declare-ok",
    (40, 20): "exchange.delete", (40, 21): "exchange.delete-ok",
    (50, 10): "queue.declare", (50, 11): "queue.declare-ok",
    (50, 20): "queue.bind", (50, 21): "queue.bind-ok",
    (50, 30): "queue.purge", (50, 31): "queue.purge-ok",
    (50, 40): "queue.delete", (50, 41): "queue.delete-ok",
    (50, 50): "queue.unbind", (50, 51): "queue.unbind-ok",
    (60, 10): "basic.qos", (60, 11): "basic.qos-ok",
    (60, 20): "basic.consume", (60, 21): "basic.consume-ok",
    (60, 30): "basic.cancel", (60, 31): "basic.cancel-ok",
    (60, 40): "basic.publish", (60, 50): "basic.return",
    (60, 60): "basic.deliver", (60, 70): "basic.get",
    (60, 71): "basic.get-ok", (60, 72): "basic.get-empty",
    (60, 80): "basic.ack", (60, 90): "basic.reject",
    (60, 100): "basic.recover-async", (60, 110): "basic.recover",
    (60, 111): "basic.recover-ok", (60, 120): "basic.nack",
    (85, 10): "confirm.select", (85, 11): "confirm.select-ok",
    (90, 10): "tx.select", (90, 11): "tx.select-ok",
    (90, 20): "tx.commit", (90, 21): "tx.commit-ok",
    (90, 30): "tx.rollback", (90, 31): "tx.rollback-ok",
}


def shortstr(s):
    b = s.encode() if isinstance(s, str) else s
    return bytes([len(b)]) + b


def longstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">I", len(b)) + b


def table(d=None):
    body = b""
    for k, v in (d or {}).items():
        body += shortstr(k)
        if isinstance(v, bool):
            body += b"t" + bytes([1 if v else 0])
        elif isinstance(v, int):
            body += b"l" + struct.pack(">q", v)
        elif isinstance(v, dict):
            body += b"F" + table(v)
        else:
            body += b"S" + longstr(v)
    return struct.pack(">I", len(body)) + body


def bits(*flags):
    v = 0
    for i, f in enumerate(flags):
        if f:
            v |= 1 << i
    return bytes([v])


class Reader:
    def __init__(self, data):
        self.d = data
        self.i = 0

    def take(self, n):
        b = self.d[self.i:self.i + n]
        self.i += n
        return b

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack(">H", self.take(2))[0]

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def shortstr(self):
        return self.take(self.u8()).decode(errors="replace")

    def longstr(self):
        return self.take(self.u32()).decode(errors="replace")

    def typed_value(self):
        t = chr(self.u8())
        if t == "t":
            return ("t", bool(self.u8()))
        if t == "b":
            return ("b", struct.unpack(">b", self.take(1))[0])
        if t == "B":
            return ("B", self.u8())
        if t == "s":
            return ("s", struct.unpack(">h", self.take(2))[0])
        if t == "u":
            return ("u", self.u16())
        if t == "I":
            return ("I", struct.unpack(">i", self.take(4))[0])
        if t == "i":
            return ("i", self.u32())
        if t == "l":
            return ("l", struct.unpack(">q", self.take(8))[0])
        if t == "L":
            return ("L", self.u64())
        if t == "f":
            return ("f", struct.unpack(">f", self.take(4))[0])
        if t == "d":
            return ("d", struct.unpack(">d", self.take(8))[0])
        if t == "D":
            scale = self.u8()
            return ("D", (scale, self.u32()))
        if t == "S":
            return ("S", self.longstr())
        if t == "x":
            return ("x", self.take(self.u32()))
        if t == "A":
            n = self.u32()
            end = self.i + n
            items = []
            while self.i < end:
                items.append(self.typed_value())
            return ("A", items)
        if t == "T":
            return ("T", self.u64())
        if t == "F":
            return ("F", self.typed_table())
        if t == "V":
            return ("V", None)
        raise ValueError("unknown field type %r" % t)

    def typed_table(self):
        n = self.u32()
        end = self.i + n
        out = []
        while self.i < end:
            k = self.shortstr()
            out.append((k, self.typed_value()))
        return out


def show_typed(v, mask_time=True):
    t, x = v
    if t == "T":
        return "T<ts>" if mask_time else "T:%d" % x
    if t == "F":
        return "F{" + ", ".join("%s: %s" % (k, show_typed(vv, mask_time)) for k, vv in x) + "}"
    if t == "A":
        return "A[" + ", ".join(show_typed(i, mask_time) for i in x) + "]"
    return "%s:%r" % (t, x)


PROP_NAMES = ["content_type", "content_encoding", "headers", "delivery_mode", "priority",
              "correlation_id", "reply_to", "expiration", "message_id", "timestamp", "type",
              "user_id", "app_id", "cluster_id"]


def decode_properties(payload):
    r = Reader(payload)
    _cls, _weight, size, flags = r.u16(), r.u16(), r.u64(), r.u16()
    props = {}
    for i, name in enumerate(PROP_NAMES):
        if flags & (1 << (15 - i)):
            if name == "headers":
                props[name] = ("F", r.typed_table())
            elif name in ("delivery_mode", "priority"):
                props[name] = r.u8()
            elif name == "timestamp":
                props[name] = r.u64()
            else:
                props[name] = r.shortstr()
    return size, props


class Raw:
    """A raw AMQP connection. If handshake=True, does start/tune/open with the given creds."""

    def __init__(self, port, user="guest", password="guest", vhost="/", handshake=True,
                 header=PROTO, frame_max=131072, channel_max=2047, heartbeat=0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.settimeout(5)
        self.buf = b""
        self.closed = False
        self.frame_max = frame_max
        self.sock.sendall(header)
        if handshake:
            self.handshake(user, password, vhost, frame_max, channel_max, heartbeat)

    def handshake(self, user, password, vhost, frame_max, channel_max, heartbeat):
        f = self.expect_method(0, "connection.start")
        resp = b"\x00" + user.encode() + b"\x00" + password.encode()
        self.send_method(0, 10, 11, table({"product": "conf-raw"}) + shortstr("PLAIN")
                         + longstr(resp) + shortstr("en_US"))
        f = self.read_frame()
        if f is None or f[0] != 1:
            self.after_start = f
            return
        name = self.method_name(f[2])
        if name != "connection.tune":
            self.after_start = self.describe(f)
            return
        self.send_method(0, 10, 31, struct.pack(">HIH", channel_max, frame_max, heartbeat))
        self.send_method(0, 10, 40, shortstr(vhost) + shortstr("") + bits(False))
        f = self.read_frame()
        self.after_open = self.describe(f)

    # --- output ---
    def send_frame(self, ftype, ch, payload, end=FRAME_END):
        self.sock.sendall(struct.pack(">BHI", ftype, ch, len(payload)) + payload + end)

    def send_method(self, ch, cls, mid, args=b""):
        self.send_frame(1, ch, struct.pack(">HH", cls, mid) + args)

    def send_raw(self, data):
        self.sock.sendall(data)

    def send_content(self, ch, body, props_flags=0, props=b""):
        self.send_frame(2, ch, struct.pack(">HHQH", 60, 0, len(body), props_flags) + props)
        if body:
            self.send_frame(3, ch, body)

    def publish(self, ch, exchange, rk, body=b"x", mandatory=False, immediate=False,
                props_flags=0, props=b""):
        self.send_method(ch, 60, 40, struct.pack(">H", 0) + shortstr(exchange) + shortstr(rk)
                         + bits(mandatory, immediate))
        self.send_content(ch, body, props_flags, props)

    def open_channel(self, ch):
        self.send_method(ch, 20, 10, shortstr(""))
        return self.describe(self.read_frame())

    # --- input ---
    def _fill(self, n, timeout):
        deadline = time.time() + timeout
        while len(self.buf) < n:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
                raise EOFError
            self.buf += chunk

    def read_raw(self, timeout=2.0):
        """Bytes until EOF or timeout."""
        out = self.buf
        self.buf = b""
        deadline = time.time() + timeout
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                return out, "timeout"
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return out, "timeout"
            except ConnectionResetError:
                return out, "reset"
            if not chunk:
                return out, "eof"
            out += chunk

    def read_frame(self, timeout=3.0):
        """(type, channel, payload), or None on EOF, or 'timeout'."""
        try:
            self._fill(7, timeout)
            ftype, ch, size = struct.unpack(">BHI", self.buf[:7])
            self._fill(7 + size + 1, timeout)
        except EOFError:
            return None
        except TimeoutError:
            return "timeout"
        payload = self.buf[7:7 + size]
        self.buf = self.buf[7 + size + 1:]
        return (ftype, ch, payload)

    @staticmethod
    def method_name(payload):
        cls, mid = struct.unpack(">HH", payload[:4])
        return METHODS.get((cls, mid), "method(%d,%d)" % (cls, mid))

    def describe(self, f):
        if f is None:
            return "EOF"
        if f == "timeout":
            return "(no reply)"
        ftype, ch, payload = f
        if ftype == 8:
            return "heartbeat ch=%d" % ch
        if ftype == 2:
            size, props = decode_properties(payload)
            return "header ch=%d size=%d" % (ch, size)
        if ftype == 3:
            return "body ch=%d %r" % (ch, payload[:40])
        if ftype != 1:
            return "frame type %d ch=%d" % (ftype, ch)
        name = self.method_name(payload)
        r = Reader(payload[4:])
        if name in ("connection.close", "channel.close"):
            code = r.u16()
            text = r.shortstr()
            c, m = r.u16(), r.u16()
            if name == "connection.close":
                try:
                    self.send_method(0, 10, 51)
                except OSError:
                    pass
            else:
                try:
                    self.send_method(ch, 20, 41)
                except OSError:
                    pass
            return "%s ch=%d %d %r (class-id=%d method-id=%d)" % (name, ch, code, text, c, m)
        if name == "basic.return":
            code = r.u16()
            text = r.shortstr()
            return "basic.return ch=%d %d %r exchange=%r rk=%r" % (
                ch, code, text, r.shortstr(), r.shortstr())
        if name in ("basic.ack", "basic.nack"):
            tag = r.u64()
            return "%s ch=%d tag=%d flags=%d" % (name, ch, tag, r.u8())
        if name == "basic.cancel-ok":
            return "basic.cancel-ok ch=%d tag=%r" % (ch, r.shortstr())
        if name == "basic.get-ok":
            tag = r.u64()
            red = r.u8()
            ex = r.shortstr()
            rk = r.shortstr()
            return "basic.get-ok ch=%d tag=%d redelivered=%d exchange=%r rk=%r count=%d" % (
                ch, tag, red, ex, rk, r.u32())
        if name == "channel.flow-ok":
            return "channel.flow-ok ch=%d active=%d" % (ch, r.u8())
        return "%s ch=%d" % (name, ch)

    def expect_method(self, ch, name):
        f = self.read_frame()
        if f is None or f == "timeout" or f[0] != 1 or self.method_name(f[2]) != name:
            raise RuntimeError("expected %s, got %s" % (name, self.describe(f)))
        return f

    def events(self, timeout=2.0, stop_on_close=True, limit=20):
        """Describe frames until a close, EOF or quiet for `timeout`."""
        out = []
        for _ in range(limit):
            f = self.read_frame(timeout)
            d = self.describe(f)
            out.append(d)
            if f is None or f == "timeout":
                break
            if stop_on_close and f[0] == 1 and self.method_name(f[2]) in (
                    "connection.close", "channel.close"):
                if self.method_name(f[2]) == "connection.close":
                    # after close-ok the server should close the socket
                    f2 = self.read_frame(timeout)
                    out.append("then " + self.describe(f2))
                break
        return out

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
