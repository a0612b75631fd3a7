#!/usr/bin/env python3
"""Side-by-side AMQP 0-9-1 conformance probe: RabbitMQ vs Hourglass.

usage: python3 tests/conformance/compare.py PORT_A PORT_B [SCENARIO_SUBSTRING...]

Runs every scenario against both brokers (127.0.0.1, guest/guest, vhost /) and prints, per
scenario, what each broker did (replies, close codes and texts, counts, tags, flags, header
tables with their wire type tags) and whether the two agree. All names start with `conf-<run>-`;
the run id is replaced by `R` in the output so the two sides can be compared textually.
Server-generated names (amq.gen-..., amq.ctag-...) are shown as a shape, not their value.
"""

import os
import re
import sys
import time
import struct
import traceback

import pika
import pika.exceptions as pe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import amqpraw  # noqa: E402
from amqpraw import Raw, shortstr, table, bits  # noqa: E402

RUN = "%x" % (int(time.time() * 1000) % 0xFFFFFFF)


def N(s):
    return "conf-%s-%s" % (RUN, s)


def normalize(text):
    text = text.replace(RUN, "R")
    text = re.sub(r"amq\.gen-[A-Za-z0-9_\-]+",
                  lambda m: "amq.gen-<%d chars%s>" % (
                      len(m.group(0)) - 8,
                      "" if re.fullmatch(r"[A-Za-z0-9_\-]{22}", m.group(0)[8:]) else " !base64url22"),
                  text)
    text = re.sub(r"amq\.ctag-[A-Za-z0-9_\-]+", "amq.ctag-<gen>", text)
    text = re.sub(r"ctag1\.[0-9a-f]{32}", "ctag1.<pika>", text)
    return text


# --------------------------------------------------------------------------------------------
# pika helpers

def params(port, user="guest", password="guest", vhost="/"):
    return pika.ConnectionParameters(
        host="127.0.0.1", port=port, virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0, connection_attempts=1, socket_timeout=5, blocked_connection_timeout=10)


def fmt(r):
    if r is None:
        return ""
    if isinstance(r, pika.frame.Method):
        m = r.method
        d = {k: v for k, v in vars(m).items() if not k.startswith("_")}
        return "%s %s" % (m.NAME, d)
    return repr(r)


class Ctx:
    """A pika connection + channel that reopens itself after the broker closes either."""

    def __init__(self, port):
        self.port = port
        self.obs = []
        self.conn = None
        self.ch = None

    def c(self):
        if self.conn is None or not self.conn.is_open:
            self.conn = pika.BlockingConnection(params(self.port))
            self.ch = None
        return self.conn

    def chan(self):
        if self.ch is None or not self.ch.is_open:
            self.ch = self.c().channel()
        return self.ch

    def new_chan(self):
        return self.c().channel()

    def note(self, label, value):
        self.obs.append("%s: %s" % (label, value))

    def do(self, label, fn, barrier=False):
        """Run fn(channel); record ok/close. barrier: follow with a synchronous round trip so an
        asynchronous method's error (ack, publish...) surfaces here."""
        ch = self.chan()
        try:
            r = fn(ch)
            if barrier:
                sync(ch)
            self.note(label, ("ok " + fmt(r)).strip())
            return r
        except pe.ChannelClosedByBroker as e:
            self.note(label, "CHANNEL_CLOSE %s %s" % (e.reply_code, e.reply_text))
        except pe.ConnectionClosedByBroker as e:
            self.note(label, "CONNECTION_CLOSE %s %s" % (e.reply_code, e.reply_text))
            self.conn = None
        except pe.AMQPError as e:
            self.note(label, "%s %r" % (type(e).__name__, e))
            if self.conn is not None and not self.conn.is_open:
                self.conn = None
        return None

    def close(self):
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.close()
        except Exception:
            pass


def pump(conn, seconds):
    """Process deliveries for a fixed time (process_data_events returns early on any event)."""
    end = time.time() + seconds
    while time.time() < end:
        conn.process_data_events(0.05)


def sync(ch):
    ch.exchange_declare("amq.direct", "direct", passive=True)


def get(ch, q, auto_ack=False):
    m, p, b = ch.basic_get(q, auto_ack=auto_ack)
    if m is None:
        return "get-empty"
    return "tag=%d redelivered=%s count=%d body=%r" % (m.delivery_tag, m.redelivered,
                                                        m.message_count, b)


def drain(ch, q):
    out = []
    for _ in range(20):
        m, p, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        out.append("%s%s" % (b.decode(), "(R)" if m.redelivered else ""))
    return out


def pub(ch, q, body, props=None, exchange=""):
    ch.basic_publish(exchange, q, body, properties=props)


def cleanup(port, queues=(), exchanges=()):
    try:
        c = pika.BlockingConnection(params(port))
        for q in queues:
            ch = c.channel()
            try:
                ch.queue_delete(q)
            except pe.AMQPError:
                pass
        for x in exchanges:
            ch = c.channel()
            try:
                ch.exchange_delete(x)
            except pe.AMQPError:
                pass
        c.close()
    except Exception:
        pass


def raw_get(port, q):
    """basic.get over a raw socket; returns (get-ok line, props with typed headers)."""
    r = Raw(port)
    r.open_channel(1)
    r.send_method(1, 60, 70, struct.pack(">H", 0) + shortstr(q) + bits(True))
    f = r.read_frame()
    line = r.describe(f)
    props = None
    if line.startswith("basic.get-ok"):
        hdr = r.read_frame()
        size, props = amqpraw.decode_properties(hdr[2])
        if size:
            r.read_frame()
    r.close()
    return line, props


def show_props(props, skip=("timestamp",)):
    if props is None:
        return "None"
    out = []
    for k, v in props.items():
        if k == "headers":
            out.append("headers=" + amqpraw.show_typed(v))
        elif k in skip:
            out.append("%s=<set>" % k)
        else:
            out.append("%s=%r" % (k, v))
    return " ".join(out)


SCENARIOS = []


def scenario(name):
    def deco(f):
        SCENARIOS.append((name, f))
        return f
    return deco


def qdecl(q, **kw):
    return lambda ch: ch.queue_declare(q, **kw)


def bad_queue_arg(args, label=None):
    def run(x):
        x.do("declare %r" % (args,), qdecl(N("qa"), arguments=args))
        cleanup(x.port, [N("qa")])
    return run


# --------------------------------------------------------------------------------------------
# queue.declare

@scenario("queue.declare passive missing")
def _(x):
    x.do("passive", qdecl(N("missing"), passive=True))


@scenario("queue.declare passive existing returns counts")
def _(x):
    q = N("pc")
    x.do("declare", qdecl(q, auto_delete=False))
    x.chan().basic_publish("", q, b"1")
    x.chan().basic_publish("", q, b"2")
    x.chan().basic_consume(q, lambda *a: None, auto_ack=False)
    time.sleep(0.3)
    x.do("passive", qdecl(q, passive=True))
    x.do("passive with different durable (ignored?)", qdecl(q, passive=True, durable=True))
    cleanup(x.port, [q])


@scenario("queue.declare redeclare different durable")
def _(x):
    q = N("rd")
    x.do("declare durable=False", qdecl(q))
    x.do("redeclare durable=True", qdecl(q, durable=True))
    cleanup(x.port, [q])


@scenario("queue.declare redeclare different auto_delete")
def _(x):
    q = N("ra")
    x.do("declare auto_delete=False", qdecl(q))
    x.do("redeclare auto_delete=True", qdecl(q, auto_delete=True))
    cleanup(x.port, [q])


@scenario("queue.declare redeclare different exclusive")
def _(x):
    q = N("rx")
    x.do("declare exclusive=False", qdecl(q))
    x.do("redeclare exclusive=True", qdecl(q, exclusive=True))
    q2 = N("rx2")
    x.do("declare exclusive=True", qdecl(q2, exclusive=True))
    x.do("redeclare same conn exclusive=False", qdecl(q2, exclusive=False))
    cleanup(x.port, [q])


@scenario("queue.declare redeclare different arguments")
def _(x):
    q = N("rargs")
    x.do("declare ttl=1000", qdecl(q, arguments={"x-message-ttl": 1000}))
    x.do("redeclare ttl=2000", qdecl(q, arguments={"x-message-ttl": 2000}))
    x.do("redeclare no args", qdecl(q))
    x.do("redeclare extra unknown arg", qdecl(q, arguments={"x-message-ttl": 1000, "x-foo": 1}))
    cleanup(x.port, [q])


@scenario("queue.declare x-message-ttl negative")
def _(x):
    bad_queue_arg({"x-message-ttl": -1})(x)


@scenario("queue.declare x-message-ttl string")
def _(x):
    bad_queue_arg({"x-message-ttl": "1000"})(x)


@scenario("queue.declare x-message-ttl huge (2^32 and 2^40)")
def _(x):
    bad_queue_arg({"x-message-ttl": 2 ** 32})(x)
    bad_queue_arg({"x-message-ttl": 2 ** 40})(x)


@scenario("queue.declare x-expires 0")
def _(x):
    bad_queue_arg({"x-expires": 0})(x)


@scenario("queue.declare x-max-length negative")
def _(x):
    bad_queue_arg({"x-max-length": -1})(x)


@scenario("queue.declare x-dead-letter-routing-key without x-dead-letter-exchange")
def _(x):
    bad_queue_arg({"x-dead-letter-routing-key": "rk"})(x)


@scenario("queue.declare x-overflow invalid")
def _(x):
    bad_queue_arg({"x-overflow": "drop-tail"})(x)


@scenario("queue.declare x-queue-type quorum non-durable")
def _(x):
    bad_queue_arg({"x-queue-type": "quorum"})(x)


@scenario("queue.declare x-queue-type unknown")
def _(x):
    bad_queue_arg({"x-queue-type": "banana"})(x)


@scenario("queue.declare x-max-priority out of range")
def _(x):
    bad_queue_arg({"x-max-priority": 256})(x)


@scenario("queue.declare reserved name amq.foo")
def _(x):
    x.do("declare amq.foo", qdecl("amq.foo"))
    x.do("passive amq.foo", qdecl("amq.foo", passive=True))


@scenario("queue.declare server-named")
def _(x):
    r = x.do("declare ''", qdecl("", exclusive=True))
    if r:
        x.note("name shape", r.method.queue)


@scenario("exclusive queue from another connection")
def _(x):
    q = N("excl")
    x.do("owner declares exclusive", qdecl(q, exclusive=True))
    other = Ctx(x.port)
    other.do("other: passive declare", qdecl(q, passive=True))
    other.do("other: active declare", qdecl(q))
    other.do("other: active declare exclusive", qdecl(q, exclusive=True))
    other.do("other: consume", lambda ch: ch.basic_consume(q, lambda *a: None))
    other.do("other: get", lambda ch: get(ch, q))
    other.do("other: delete", lambda ch: ch.queue_delete(q))
    other.do("other: purge", lambda ch: ch.queue_purge(q))
    other.do("other: bind", lambda ch: ch.queue_bind(q, "amq.fanout"))
    other.do("other: unbind", lambda ch: ch.queue_unbind(q, "amq.fanout"))
    other.do("other: publish to it (allowed)", lambda ch: ch.basic_publish("", q, b"x"),
             barrier=True)
    x.do("owner passive sees message", qdecl(q, passive=True))
    x.obs.extend(other.obs)
    other.close()


# --------------------------------------------------------------------------------------------
# exchange.declare / delete / bind

def xdecl(name, t="direct", **kw):
    return lambda ch: ch.exchange_declare(name, t, **kw)


@scenario("exchange.declare unknown type")
def _(x):
    x.do("declare type=banana", xdecl(N("xt"), "banana"))


@scenario("exchange.declare redeclare differing")
def _(x):
    e = N("xr")
    x.do("declare direct", xdecl(e, "direct"))
    x.do("redeclare fanout", xdecl(e, "fanout"))
    x.do("redeclare durable=True", xdecl(e, "direct", durable=True))
    x.do("redeclare auto_delete=True", xdecl(e, "direct", auto_delete=True))
    x.do("redeclare internal=True", xdecl(e, "direct", internal=True))
    x.do("redeclare alternate-exchange", xdecl(e, "direct", arguments={"alternate-exchange": "ae"}))
    x.do("redeclare unknown arg", xdecl(e, "direct", arguments={"x-foo": "bar"}))
    x.do("passive with different type", xdecl(e, "fanout", passive=True))
    cleanup(x.port, exchanges=[e])


@scenario("exchange.declare amq.* names")
def _(x):
    x.do("declare amq.x (new)", xdecl("amq.conf-x", "direct"))
    x.do("redeclare amq.direct same", xdecl("amq.direct", "direct", durable=True))
    x.do("redeclare amq.direct durable=False", xdecl("amq.direct", "direct"))
    x.do("redeclare amq.direct type fanout", xdecl("amq.direct", "fanout", durable=True))
    x.do("passive amq.headers", xdecl("amq.headers", "headers", passive=True))
    x.do("passive amq.match", xdecl("amq.match", "headers", passive=True))
    x.do("passive amq.rabbitmq.trace", xdecl("amq.rabbitmq.trace", "topic", passive=True))


@scenario("exchange.declare default ''")
def _(x):
    x.do("declare ''", xdecl("", "direct"))
    x.do("passive ''", xdecl("", "direct", passive=True))


@scenario("exchange.declare passive missing")
def _(x):
    x.do("passive", xdecl(N("xmissing"), passive=True))


@scenario("exchange.delete missing / amq.direct / ''")
def _(x):
    x.do("delete missing", lambda ch: ch.exchange_delete(N("xnope")))
    x.do("delete amq.direct", lambda ch: ch.exchange_delete("amq.direct"))
    x.do("delete ''", lambda ch: ch.exchange_delete(""))


@scenario("exchange.delete if_unused with bindings")
def _(x):
    e, q = N("xu"), N("xuq")
    x.do("declare", xdecl(e, "fanout"))
    x.do("declare q", qdecl(q))
    x.do("bind", lambda ch: ch.queue_bind(q, e))
    x.do("delete if_unused", lambda ch: ch.exchange_delete(e, if_unused=True))
    x.do("delete if_unused as e2e destination only", lambda ch: None)
    cleanup(x.port, [q], [e])


@scenario("exchange.bind missing source / destination")
def _(x):
    e = N("xb")
    x.do("declare", xdecl(e, "fanout"))
    x.do("bind missing source", lambda ch: ch.exchange_bind(e, N("nosrc")))
    x.do("bind missing destination", lambda ch: ch.exchange_bind(N("nodst"), e))
    x.do("unbind missing", lambda ch: ch.exchange_unbind(e, N("nosrc")))
    x.do("bind destination=''", lambda ch: ch.exchange_bind("", e))
    cleanup(x.port, exchanges=[e])


# --------------------------------------------------------------------------------------------
# queue.bind / unbind

@scenario("queue.bind missing queue / exchange / default")
def _(x):
    q = N("bq")
    x.do("declare q", qdecl(q))
    x.do("bind missing queue", lambda ch: ch.queue_bind(N("noq"), "amq.direct"))
    x.do("bind missing exchange", lambda ch: ch.queue_bind(q, N("nox")))
    x.do("bind to default exchange", lambda ch: ch.queue_bind(q, "", routing_key="k"))
    x.do("unbind from default exchange", lambda ch: ch.queue_unbind(q, "", routing_key=q))
    cleanup(x.port, [q])


@scenario("queue.unbind nonexistent binding")
def _(x):
    q = N("ub")
    x.do("declare q", qdecl(q))
    x.do("unbind never-bound", lambda ch: ch.queue_unbind(q, "amq.direct", routing_key="nope"))
    x.do("unbind missing exchange", lambda ch: ch.queue_unbind(q, N("nox"), routing_key="k"))
    x.do("unbind missing queue", lambda ch: ch.queue_unbind(N("noq"), "amq.direct", routing_key="k"))
    cleanup(x.port, [q])


@scenario("headers exchange bind x-match invalid")
def _(x):
    q = N("hb")
    x.do("declare q", qdecl(q))
    x.do("bind x-match=foo", lambda ch: ch.queue_bind(q, "amq.headers",
                                                      arguments={"x-match": "foo", "a": "1"}))
    x.do("bind x-match=any-with-x", lambda ch: ch.queue_bind(
        q, "amq.headers", arguments={"x-match": "any-with-x", "a": "1"}))
    cleanup(x.port, [q])


# --------------------------------------------------------------------------------------------
# basic.publish

@scenario("basic.publish to missing exchange")
def _(x):
    x.do("publish", lambda ch: ch.basic_publish(N("nox"), "k", b"x"), barrier=True)


@scenario("basic.publish to internal exchange")
def _(x):
    e = N("xi")
    x.do("declare internal", xdecl(e, "fanout", internal=True))
    x.do("publish", lambda ch: ch.basic_publish(e, "k", b"x"), barrier=True)
    cleanup(x.port, exchanges=[e])


@scenario("basic.publish mandatory unroutable + confirm order (raw)")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 85, 10, bits(False))
    x.note("confirm.select", r.describe(r.read_frame()))
    r.publish(1, "amq.direct", N("nowhere"), b"m1", mandatory=True)
    r.publish(1, "", N("nowhere"), b"m2", mandatory=True)
    r.publish(1, "", N("nowhere"), b"m3", mandatory=False)
    x.note("frames", r.events(timeout=1.0))
    r.close()


@scenario("basic.publish immediate=true (raw)")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.publish(1, "amq.direct", "k", b"x", immediate=True)
    x.note("frames", r.events(timeout=1.5))
    r.close()


@scenario("basic.publish expiration invalid")
def _(x):
    q = N("exp")
    x.do("declare", qdecl(q))
    for e in ["abc", "-1", "1.5", "", " 10", "99999999999999999999"]:
        x.do("expiration=%r" % e, lambda ch: ch.basic_publish(
            "", q, b"x", pika.BasicProperties(expiration=e)), barrier=True)
    x.do("queue depth after", qdecl(q, passive=True))
    cleanup(x.port, [q])


@scenario("basic.publish user_id mismatch")
def _(x):
    q = N("uid")
    x.do("declare", qdecl(q))
    x.do("user_id=bob", lambda ch: ch.basic_publish("", q, b"x", pika.BasicProperties(
        user_id="bob")), barrier=True)
    x.do("user_id=guest", lambda ch: ch.basic_publish("", q, b"x", pika.BasicProperties(
        user_id="guest")), barrier=True)
    x.do("depth", qdecl(q, passive=True))
    cleanup(x.port, [q])


@scenario("basic.publish default exchange to missing queue (silently dropped?)")
def _(x):
    x.do("publish", lambda ch: ch.basic_publish("", N("noq"), b"x"), barrier=True)


@scenario("x-overflow reject-publish + confirms (nack) and drop-head order")
def _(x):
    q = N("ovr")
    x.do("declare reject-publish max 1", qdecl(q, arguments={"x-max-length": 1,
                                                            "x-overflow": "reject-publish"}))
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 85, 10, bits(False))
    r.read_frame()
    r.publish(1, "", q, b"a")
    r.publish(1, "", q, b"b")
    x.note("confirm frames", r.events(timeout=1.0))
    r.close()
    q2 = N("ovd")
    x.do("declare drop-head max 2", qdecl(q2, arguments={"x-max-length": 2}))
    for b in [b"1", b"2", b"3"]:
        x.chan().basic_publish("", q2, b)
    x.do("drain", lambda ch: drain(ch, q2))
    cleanup(x.port, [q, q2])


# --------------------------------------------------------------------------------------------
# acks

def setup_msgs(x, q, n):
    x.do("declare", qdecl(q))
    for i in range(1, n + 1):
        x.chan().basic_publish("", q, str(i).encode())


@scenario("basic.ack unknown tag")
def _(x):
    q = N("ack1")
    setup_msgs(x, q, 1)
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 99", lambda ch: ch.basic_ack(99), barrier=True)
    x.do("depth after channel close", qdecl(q, passive=True))
    cleanup(x.port, [q])


@scenario("basic.ack double ack")
def _(x):
    q = N("ack2")
    setup_msgs(x, q, 1)
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 1", lambda ch: ch.basic_ack(1), barrier=True)
    x.do("ack 1 again", lambda ch: ch.basic_ack(1), barrier=True)
    cleanup(x.port, [q])


@scenario("basic.ack multiple with tag beyond last")
def _(x):
    q = N("ack3")
    setup_msgs(x, q, 2)
    x.do("get", lambda ch: get(ch, q))
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 10 multiple", lambda ch: ch.basic_ack(10, multiple=True), barrier=True)
    x.do("depth", qdecl(q, passive=True))
    cleanup(x.port, [q])


@scenario("basic.ack tag 0 multiple=false / multiple=true")
def _(x):
    q = N("ack4")
    setup_msgs(x, q, 2)
    x.do("get", lambda ch: get(ch, q))
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 0 multiple=true (all)", lambda ch: ch.basic_ack(0, multiple=True), barrier=True)
    x.do("depth", qdecl(q, passive=True))
    x.do("ack 0 multiple=false (nothing outstanding)", lambda ch: ch.basic_ack(0), barrier=True)
    setup_msgs(x, q, 1)
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 0 multiple=false (one outstanding)", lambda ch: ch.basic_ack(0), barrier=True)
    cleanup(x.port, [q])


@scenario("basic.nack multiple requeue order")
def _(x):
    q = N("nack")
    setup_msgs(x, q, 3)
    for _ in range(3):
        x.do("get", lambda ch: get(ch, q))
    x.do("nack 2 multiple requeue", lambda ch: ch.basic_nack(2, multiple=True, requeue=True),
         barrier=True)
    x.do("drain", lambda ch: drain(ch, q))
    x.do("nack 3 (still unacked)", lambda ch: ch.basic_nack(3, requeue=True), barrier=True)
    x.do("drain", lambda ch: drain(ch, q))
    cleanup(x.port, [q])


@scenario("basic.reject requeue position + redelivered")
def _(x):
    q = N("rej")
    setup_msgs(x, q, 3)
    x.do("get", lambda ch: get(ch, q))
    x.do("get", lambda ch: get(ch, q))
    x.do("reject 2 requeue", lambda ch: ch.basic_reject(2, requeue=True), barrier=True)
    x.do("get", lambda ch: get(ch, q))
    x.do("reject 3 requeue", lambda ch: ch.basic_reject(3, requeue=True), barrier=True)
    x.do("reject 1 requeue", lambda ch: ch.basic_reject(1, requeue=True), barrier=True)
    x.do("drain", lambda ch: drain(ch, q))
    x.do("reject 99", lambda ch: ch.basic_reject(99), barrier=True)
    cleanup(x.port, [q])


@scenario("basic.recover requeue=false / requeue=true")
def _(x):
    q = N("rec")
    setup_msgs(x, q, 2)
    x.do("get", lambda ch: get(ch, q))
    x.do("recover requeue=false", lambda ch: ch.basic_recover(requeue=False))
    x.do("get after", lambda ch: get(ch, q))
    x.do("recover requeue=true", lambda ch: ch.basic_recover(requeue=True))
    x.do("drain", lambda ch: drain(ch, q))
    cleanup(x.port, [q])


@scenario("basic.recover requeue=false with consumer (redelivered to same consumer)")
def _(x):
    q = N("rec2")
    setup_msgs(x, q, 1)
    got = []
    ch = x.chan()
    ch.basic_consume(q, lambda c, m, p, b: got.append((m.delivery_tag, m.redelivered, b)),
                     consumer_tag="c1")
    pump(x.c(), 0.3)
    x.do("recover requeue=false", lambda ch: ch.basic_recover(requeue=False))
    pump(x.c(), 0.5)
    x.note("deliveries", got)
    cleanup(x.port, [q])


@scenario("basic.qos prefetch_size=1")
def _(x):
    x.do("qos prefetch_size=1", lambda ch: ch.basic_qos(prefetch_size=1))


@scenario("basic.qos global semantics")
def _(x):
    qa, qb = N("qga"), N("qgb")
    for g in (False, True):
        c = pika.BlockingConnection(params(x.port))
        ch = c.channel()
        for q in (qa, qb):
            ch.queue_declare(q)
            ch.queue_purge(q)
            ch.basic_publish("", q, b"m1")
            ch.basic_publish("", q, b"m2")
        ch.basic_qos(prefetch_count=1, global_qos=g)
        got = []
        ch.basic_consume(qa, lambda c_, m, p, b: got.append("a"))
        ch.basic_consume(qb, lambda c_, m, p, b: got.append("b"))
        pump(c, 0.5)
        x.note("global=%s deliveries" % g, sorted(got))
        c.close()
    # qos global + per-consumer combined
    c = pika.BlockingConnection(params(x.port))
    ch = c.channel()
    for q in (qa, qb):
        ch.queue_purge(q)
        for i in range(3):
            ch.basic_publish("", q, b"m")
    ch.basic_qos(prefetch_count=3, global_qos=True)
    ch.basic_qos(prefetch_count=1, global_qos=False)
    got = []
    ch.basic_consume(qa, lambda c_, m, p, b: got.append("a"))
    ch.basic_consume(qb, lambda c_, m, p, b: got.append("b"))
    pump(c, 0.5)
    x.note("global=3 + per-consumer=1 deliveries", sorted(got))
    c.close()
    cleanup(x.port, [qa, qb])


@scenario("basic.consume duplicate tag / missing queue")
def _(x):
    q = N("dup")
    x.do("declare", qdecl(q))
    x.do("consume tag=t1", lambda ch: ch.basic_consume(q, lambda *a: None, consumer_tag="t1"))
    # pika refuses a duplicate tag locally, so send it raw
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 20, struct.pack(">H", 0) + shortstr(q) + shortstr("t1") + bits()
                  + table())
    x.note("raw consume t1", r.describe(r.read_frame()))
    r.send_method(1, 60, 20, struct.pack(">H", 0) + shortstr(q) + shortstr("t1") + bits()
                  + table())
    x.note("raw consume t1 again", r.events(timeout=1.0))
    r.close()
    x.do("consume missing queue", lambda ch: ch.basic_consume(N("noq"), lambda *a: None))
    x.do("get missing queue", lambda ch: get(ch, N("noq")))
    cleanup(x.port, [q])


@scenario("basic.consume exclusive consumer conflict")
def _(x):
    q = N("exc")
    x.do("declare", qdecl(q))
    x.do("consume exclusive", lambda ch: ch.basic_consume(q, lambda *a: None, exclusive=True))
    ch2 = x.new_chan()
    try:
        ch2.basic_consume(q, lambda *a: None)
        x.note("second consumer (non-exclusive)", "ok")
    except pe.ChannelClosedByBroker as e:
        x.note("second consumer (non-exclusive)", "CHANNEL_CLOSE %s %s" % (e.reply_code,
                                                                          e.reply_text))
    ch3 = x.new_chan()
    try:
        ch3.basic_consume(q, lambda *a: None, exclusive=True)
        x.note("third consumer (exclusive)", "ok")
    except pe.ChannelClosedByBroker as e:
        x.note("third consumer (exclusive)", "CHANNEL_CLOSE %s %s" % (e.reply_code, e.reply_text))
    q2 = N("exc2")
    x.do("declare q2", qdecl(q2))
    x.do("consume non-exclusive", lambda ch: ch.basic_consume(q2, lambda *a: None))
    ch4 = x.new_chan()
    try:
        ch4.basic_consume(q2, lambda *a: None, exclusive=True)
        x.note("exclusive consume on queue with consumer", "ok")
    except pe.ChannelClosedByBroker as e:
        x.note("exclusive consume on queue with consumer", "CHANNEL_CLOSE %s %s" % (
            e.reply_code, e.reply_text))
    cleanup(x.port, [q, q2])


@scenario("basic.cancel unknown tag (raw)")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 30, shortstr("nope") + bits(False))
    x.note("cancel nope", r.events(timeout=1.0))
    r.close()


@scenario("basic.get on empty queue")
def _(x):
    q = N("empty")
    x.do("declare", qdecl(q))
    x.do("get", lambda ch: get(ch, q))
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 70, struct.pack(">H", 0) + shortstr(q) + bits(False))
    f = r.read_frame()
    x.note("raw get-empty frame payload", f[2].hex() if isinstance(f, tuple) else f)
    r.close()
    cleanup(x.port, [q])


@scenario("channel.flow active=false / true (raw)")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 20, 20, bits(True))
    x.note("flow active=true", r.events(timeout=1.0))
    r.send_method(1, 20, 20, bits(False))
    x.note("flow active=false", r.events(timeout=1.0))
    r.close()


# --------------------------------------------------------------------------------------------
# tx / confirm

@scenario("tx.commit / rollback without select")
def _(x):
    x.do("commit", lambda ch: ch.tx_commit())
    x.do("rollback", lambda ch: ch.tx_rollback())


@scenario("confirm.select after tx.select and vice versa")
def _(x):
    x.do("tx.select", lambda ch: ch.tx_select())
    x.do("confirm.select", lambda ch: ch.confirm_delivery())
    x.ch = None
    x.do("confirm.select", lambda ch: ch.confirm_delivery())
    x.do("tx.select", lambda ch: ch.tx_select())


@scenario("tx rollback requeues nothing / ack in tx")
def _(x):
    q = N("tx")
    setup_msgs(x, q, 2)
    x.do("tx.select", lambda ch: ch.tx_select())
    x.do("publish 3", lambda ch: ch.basic_publish("", q, b"3"))
    x.do("get", lambda ch: get(ch, q))
    x.do("ack 1", lambda ch: ch.basic_ack(1))
    x.do("rollback", lambda ch: ch.tx_rollback())
    x.do("depth (unacked 1 still held, 3 discarded)", qdecl(q, passive=True))
    x.do("get", lambda ch: get(ch, q))
    cleanup(x.port, [q])


# --------------------------------------------------------------------------------------------
# dead-lettering

def dlx_setup(x, src_args=None, dlq_args=None):
    dlx, dlq, src = N("dlx"), N("dlq"), N("src")
    x.do("declare dlx", xdecl(dlx, "fanout"))
    x.do("declare dlq", qdecl(dlq, arguments=dlq_args))
    x.do("bind dlq", lambda ch: ch.queue_bind(dlq, dlx))
    a = {"x-dead-letter-exchange": dlx}
    a.update(src_args or {})
    x.do("declare src", qdecl(src, arguments=a))
    return dlx, dlq, src


@scenario("dead-letter reject requeue=false: x-death table")
def _(x):
    dlx, dlq, src = dlx_setup(x)
    x.chan().basic_publish("", src, b"hello", pika.BasicProperties(
        headers={"app": "v"}, message_id="m1", delivery_mode=2))
    x.do("get", lambda ch: get(ch, src))
    x.do("reject requeue=false", lambda ch: ch.basic_reject(1, requeue=False), barrier=True)
    time.sleep(0.2)
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter nack requeue=false multiple: x-death")
def _(x):
    dlx, dlq, src = dlx_setup(x)
    for b in (b"a", b"b"):
        x.chan().basic_publish("", src, b)
    x.do("get", lambda ch: get(ch, src))
    x.do("get", lambda ch: get(ch, src))
    x.do("nack 2 multiple requeue=false", lambda ch: ch.basic_nack(2, multiple=True,
                                                                   requeue=False), barrier=True)
    time.sleep(0.2)
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter per-message TTL expiry: x-death with original-expiration")
def _(x):
    dlx, dlq, src = dlx_setup(x)
    x.chan().basic_publish("", src, b"ttl", pika.BasicProperties(expiration="100"))
    time.sleep(0.6)
    x.do("src depth", qdecl(src, passive=True))
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter queue TTL expiry + dl routing key")
def _(x):
    dlx, dlq, src = dlx_setup(x, src_args={"x-message-ttl": 100,
                                          "x-dead-letter-routing-key": "newrk"})
    x.chan().basic_publish("", src, b"ttl")
    time.sleep(0.6)
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter maxlen overflow drop-head: x-death reason")
def _(x):
    dlx, dlq, src = dlx_setup(x, src_args={"x-max-length": 1})
    x.chan().basic_publish("", src, b"first")
    x.chan().basic_publish("", src, b"second")
    time.sleep(0.3)
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter twice through the same queue: count 2 and order")
def _(x):
    dlx, dlq, src = dlx_setup(x, dlq_args={"x-dead-letter-exchange": "",
                                           "x-dead-letter-routing-key": N("src")})
    x.chan().basic_publish("", src, b"loop")
    for qq in (src, dlq, src):
        time.sleep(0.2)
        ch = x.chan()
        m, p, b = ch.basic_get(qq)
        x.note("get from %s" % qq, "tag=%s" % (m.delivery_tag if m else None))
        if m:
            ch.basic_reject(m.delivery_tag, requeue=False)
            sync(ch)
    time.sleep(0.2)
    line, props = raw_get(x.port, dlq)
    x.note("dlq get", line)
    x.note("dlq props", show_props(props))
    cleanup(x.port, [dlq, src], [dlx])


@scenario("dead-letter to missing DLX (message dropped)")
def _(x):
    src = N("dlmiss")
    x.do("declare", qdecl(src, arguments={"x-dead-letter-exchange": N("nodlx")}))
    x.chan().basic_publish("", src, b"x")
    x.do("get", lambda ch: get(ch, src))
    x.do("reject requeue=false", lambda ch: ch.basic_reject(1, requeue=False), barrier=True)
    x.do("depth", qdecl(src, passive=True))
    cleanup(x.port, [src])


# --------------------------------------------------------------------------------------------
# purge / delete

@scenario("queue.delete if_empty / if_unused / purge / delete-ok counts")
def _(x):
    q = N("del")
    setup_msgs(x, q, 3)
    x.do("delete if_empty", lambda ch: ch.queue_delete(q, if_empty=True))
    x.do("purge", lambda ch: ch.queue_purge(q))
    x.do("purge again", lambda ch: ch.queue_purge(q))
    for i in range(2):
        x.chan().basic_publish("", q, b"x")
    x.do("get (unacked)", lambda ch: get(ch, q))
    x.do("purge with 1 unacked", lambda ch: ch.queue_purge(q))
    ch2 = x.new_chan()
    ch2.basic_consume(q, lambda *a: None)
    x.do("delete if_unused", lambda ch: ch.queue_delete(q, if_unused=True))
    ch2.close()
    for i in range(4):
        x.chan().basic_publish("", q, b"x")
    x.do("delete (4 ready + 1 unacked)", lambda ch: ch.queue_delete(q))
    x.do("delete missing", lambda ch: ch.queue_delete(N("noq")))
    x.do("purge missing", lambda ch: ch.queue_purge(N("noq")))


@scenario("auto-delete queue after last consumer cancels")
def _(x):
    q = N("ad")
    x.do("declare auto_delete", qdecl(q, auto_delete=True))
    x.do("passive (never consumed, should still exist)", qdecl(q, passive=True))
    ch = x.chan()
    ch.basic_consume(q, lambda *a: None, consumer_tag="c")
    ch.basic_cancel("c")
    time.sleep(0.2)
    x.do("passive after cancel", qdecl(q, passive=True))


# --------------------------------------------------------------------------------------------
# x-expires lease

def lease(x, q, how):
    x.do("declare x-expires=1500", qdecl(q, arguments={"x-expires": 1500}))
    t0 = time.time()
    while time.time() - t0 < 3.0:
        time.sleep(0.5)
        c = pika.BlockingConnection(params(x.port))
        ch = c.channel()
        try:
            if how == "passive":
                ch.queue_declare(q, passive=True)
            elif how == "active":
                ch.queue_declare(q, arguments={"x-expires": 1500})
            elif how == "get":
                ch.basic_get(q)
        except pe.ChannelClosedByBroker as e:
            x.note("renew at %.1fs" % (time.time() - t0), "CHANNEL_CLOSE %s" % e.reply_code)
            c.close()
            break
        c.close()
    x.do("exists at ~3s?", qdecl(q, passive=True))
    cleanup(x.port, [q])


@scenario("x-expires: passive declare renews lease?")
def _(x):
    lease(x, N("lease-p"), "passive")


@scenario("x-expires: active redeclare renews lease?")
def _(x):
    lease(x, N("lease-a"), "active")


@scenario("x-expires: basic.get renews lease?")
def _(x):
    lease(x, N("lease-g"), "get")


# --------------------------------------------------------------------------------------------
# connection level (raw)

@scenario("conn: wrong protocol header")
def _(x):
    for hdr in (b"AMQP\x00\x00\x08\x00", b"AMQP\x01\x01\x00\x09", b"GET / HTTP/1.1\r\n\r\n"):
        r = Raw(x.port, handshake=False, header=hdr)
        data, how = r.read_raw(timeout=2.0)
        x.note("sent %r" % hdr, "got %r then %s" % (data[:40], how))
        r.close()


@scenario("conn: frame on a never-opened channel")
def _(x):
    r = Raw(x.port)
    r.send_method(5, 50, 10, struct.pack(">H", 0) + shortstr(N("x")) + bits(False, False, False,
                                                                          True) + table())
    x.note("queue.declare on ch 5", r.events())
    r.close()
    r = Raw(x.port)
    r.send_method(5, 20, 40, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
    x.note("channel.close on ch 5", r.events())
    r.close()
    r = Raw(x.port)
    r.send_method(5, 20, 41)
    x.note("channel.close-ok on ch 5", r.events())
    r.close()
    r = Raw(x.port)
    r.send_content(5, b"abc")
    x.note("content header on ch 5", r.events())
    r.close()


@scenario("conn: second channel.open on same channel")
def _(x):
    r = Raw(x.port)
    x.note("open 1", r.open_channel(1))
    r.send_method(1, 20, 10, shortstr(""))
    x.note("open 1 again", r.events())
    r.close()


@scenario("conn: non-connection method on channel 0")
def _(x):
    r = Raw(x.port)
    r.send_method(0, 50, 10, struct.pack(">H", 0) + shortstr(N("x")) + bits(False, False, False,
                                                                          True) + table())
    x.note("queue.declare on ch 0", r.events())
    r.close()
    r = Raw(x.port)
    r.send_method(0, 20, 10, shortstr(""))
    x.note("channel.open on ch 0", r.events())
    r.close()


@scenario("conn: connection method on channel 1")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
    x.note("connection.close on ch 1", r.events())
    r.close()


@scenario("conn: heartbeat on channel 1")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_frame(8, 1, b"")
    x.note("heartbeat ch 1", r.events())
    r.close()


@scenario("conn: bad credentials with authentication_failure_close capability")
def _(x):
    for user, pw in (("guest", "wrong"), ("nobody", "x")):
        r = Raw(x.port, handshake=False)
        r.expect_method(0, "connection.start")
        r.send_method(0, 10, 11, table({"product": "conf", "capabilities": {
            "authentication_failure_close": True}}) + shortstr("PLAIN")
            + amqpraw.longstr(b"\x00" + user.encode() + b"\x00" + pw.encode()) + shortstr("en_US"))
        x.note("user=%s" % user, r.events(timeout=3))
        r.close()


@scenario("conn: bad credentials (no capability) / vhost not found")
def _(x):
    r = Raw(x.port, password="wrong")
    x.note("bad password", r.describe(r.after_start) if isinstance(r.after_start, tuple)
           or r.after_start is None else r.after_start)
    x.note("then", r.events(timeout=1.0, stop_on_close=False)[:2])
    r.close()
    r = Raw(x.port, user="nobody", password="x")
    ev = r.after_start
    x.note("unknown user", r.describe(ev) if isinstance(ev, tuple) or ev is None else ev)
    r.close()
    r = Raw(x.port, vhost="/conf-nope")
    x.note("vhost missing", r.after_open)
    x.note("then", r.events(timeout=1.0, stop_on_close=False)[:2])
    r.close()
    try:
        pika.BlockingConnection(params(x.port, password="wrong"))
        x.note("pika bad password", "connected?!")
    except pe.AMQPError as e:
        x.note("pika bad password", "%s %r" % (type(e).__name__, e))


@scenario("conn: unknown mechanism")
def _(x):
    r = Raw(x.port, handshake=False)
    r.expect_method(0, "connection.start")
    r.send_method(0, 10, 11, table({"product": "conf-raw"}) + shortstr("CRAM-MD5")
                  + longstr_(b"x") + shortstr("en_US"))
    x.note("start-ok mechanism=CRAM-MD5", r.events())
    r.close()


def longstr_(b):
    return amqpraw.longstr(b)


@scenario("conn: frame errors (bad frame-end, unknown type, oversized)")
def _(x):
    r = Raw(x.port)
    r.open_channel(1)
    r.send_frame(1, 1, struct.pack(">HH", 60, 10) + struct.pack(">IHB", 0, 1, 0), end=b"\x00")
    x.note("bad frame end", r.events())
    r.close()
    r = Raw(x.port)
    r.open_channel(1)
    r.send_frame(9, 1, b"abc")
    x.note("frame type 9", r.events())
    r.close()
    r = Raw(x.port, frame_max=4096)
    r.open_channel(1)
    r.publish(1, "amq.direct", "k", b"z" * 5000)
    x.note("body frame 5000 > frame_max 4096", r.events())
    r.close()
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 999)
    x.note("unknown method basic.999", r.events())
    r.close()
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 40, struct.pack(">H", 0) + shortstr("amq.direct") + shortstr("k")
                  + bits())
    r.send_method(1, 60, 10, struct.pack(">IHB", 0, 1, 0))
    x.note("method where content header expected", r.events())
    r.close()
    r = Raw(x.port)
    r.open_channel(1)
    r.send_frame(3, 1, b"stray body")
    x.note("body frame without publish", r.events())
    r.close()
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 40, struct.pack(">H", 0) + shortstr("amq.direct") + shortstr("k")
                  + bits())
    r.send_frame(2, 1, struct.pack(">HHQH", 60, 0, 3, 0))
    r.send_frame(3, 1, b"abcdef")
    x.note("body longer than header size", r.events())
    r.close()


@scenario("conn: channel number above negotiated channel_max")
def _(x):
    r = Raw(x.port, channel_max=10)
    r.send_method(11, 20, 10, shortstr(""))
    x.note("open ch 11 (channel_max=10)", r.events())
    r.close()


@scenario("conn: channel reuse after close (stale state)")
def _(x):
    q = N("reuse")
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(q) + bits() + table())
    x.note("declare", r.describe(r.read_frame()))
    r.send_method(1, 20, 40, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))
    x.note("close ch1", r.describe(r.read_frame()))
    x.note("reopen ch1", r.open_channel(1))
    r.send_method(1, 60, 80, struct.pack(">Q", 1) + bits(False))
    x.note("ack 1 on fresh channel", r.events(timeout=1.0))
    r.close()
    cleanup(x.port, [q])


# --------------------------------------------------------------------------------------------
# more: server properties, RPC, priorities, field types, routing

@scenario("conn: connection.start capabilities + tune values")
def _(x):
    r = Raw(x.port, handshake=False)
    f = r.expect_method(0, "connection.start")
    rd = amqpraw.Reader(f[2][4:])
    ver = (rd.u8(), rd.u8())
    props = rd.typed_table()
    caps = dict(props).get("capabilities")
    x.note("version-major/minor", ver)
    x.note("capabilities", sorted(k for k, v in caps[1]) if caps else None)
    x.note("server property keys", sorted(k for k, v in props))
    x.note("mechanisms / locales", (rd.longstr(), rd.longstr()))
    r.send_method(0, 10, 11, table({"product": "x"}) + shortstr("PLAIN")
                  + amqpraw.longstr(b"\x00guest\x00guest") + shortstr("en_US"))
    f = r.read_frame()
    rd = amqpraw.Reader(f[2][4:])
    x.note("tune channel_max/frame_max/heartbeat", (rd.u16(), rd.u32(), rd.u16()))
    r.close()


@scenario("direct reply-to (amq.rabbitmq.reply-to) RPC")
def _(x):
    q = N("rpc")
    x.do("declare server queue", qdecl(q))
    got = []
    ch = x.chan()
    x.do("consume amq.rabbitmq.reply-to no_ack", lambda ch: ch.basic_consume(
        "amq.rabbitmq.reply-to", lambda c, m, p, b: got.append(b), auto_ack=True))
    x.do("publish request with reply_to", lambda ch: ch.basic_publish(
        "", q, b"req", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to")), barrier=True)
    m, p, b = x.chan().basic_get(q, auto_ack=True) if x.ch and x.ch.is_open else (None, None, None)
    x.note("server sees reply_to", (p.reply_to[:26] + "...") if p and p.reply_to else None)
    if p and p.reply_to:
        x.chan().basic_publish("", p.reply_to, b"resp")
        pump(x.c(), 0.5)
    x.note("client got reply", got)
    cleanup(x.port, [q])


@scenario("priority queue ordering (x-max-priority=10)")
def _(x):
    q = N("prio")
    x.do("declare", qdecl(q, arguments={"x-max-priority": 10}))
    for pr, body in ((1, b"p1"), (9, b"p9"), (5, b"p5"), (None, b"pnone"), (20, b"p20")):
        x.chan().basic_publish("", q, body, pika.BasicProperties(priority=pr))
    x.do("drain", lambda ch: drain(ch, q))
    cleanup(x.port, [q])


@scenario("field table value types round trip (raw publish, raw get)")
def _(x):
    q = N("types")
    x.do("declare", qdecl(q))
    vals = [("b", b"b" + struct.pack(">b", -5)), ("B", b"B" + bytes([200])),
            ("s", b"s" + struct.pack(">h", -300)), ("u", b"u" + struct.pack(">H", 60000)),
            ("I", b"I" + struct.pack(">i", -70000)), ("i", b"i" + struct.pack(">I", 3000000000)),
            ("l", b"l" + struct.pack(">q", -2 ** 40)), ("L", b"L" + struct.pack(">Q", 2 ** 63)),
            ("f", b"f" + struct.pack(">f", 1.5)), ("d", b"d" + struct.pack(">d", 2.25)),
            ("D", b"D" + bytes([2]) + struct.pack(">I", 12345)),
            ("S", b"S" + amqpraw.longstr("str")), ("x", b"x" + amqpraw.longstr(b"\x00\x01")),
            ("T", b"T" + struct.pack(">Q", 1700000000)), ("t", b"t\x01"), ("V", b"V"),
            ("A", b"A" + struct.pack(">I", 7) + b"I" + struct.pack(">i", 1) + b"t\x00"),
            ("F", b"F" + struct.pack(">I", 7) + shortstr("k") + b"t\x01" + shortstr("v") + b"V")]
    body = b"".join(shortstr("h" + k) + v for k, v in vals)
    hdr = struct.pack(">I", len(body)) + body
    flags = 1 << 13  # headers
    r = Raw(x.port)
    r.open_channel(1)
    r.publish(1, "", q, b"typed", props_flags=flags, props=hdr)
    r.send_method(1, 40, 10, struct.pack(">H", 0) + shortstr("amq.direct") + shortstr("direct")
                  + bits(True) + table())
    x.note("publish", r.describe(r.read_frame()))
    r.close()
    line, props = raw_get(x.port, q)
    x.note("get", line)
    x.note("headers", show_props(props, skip=()))
    cleanup(x.port, [q])


@scenario("all 14 basic properties round trip")
def _(x):
    q = N("props")
    x.do("declare", qdecl(q))
    x.chan().basic_publish("", q, b"p", pika.BasicProperties(
        content_type="text/plain", content_encoding="gzip", headers={"k": "v"},
        delivery_mode=2, priority=3, correlation_id="c", reply_to="r", expiration="60000",
        message_id="m", timestamp=1700000000, type="t", user_id="guest", app_id="a",
        cluster_id="cl"))
    line, props = raw_get(x.port, q)
    x.note("get", line)
    x.note("props", show_props(props, skip=()))
    cleanup(x.port, [q])


@scenario("consumer cancel notification when queue deleted")
def _(x):
    q = N("cn")
    x.do("declare", qdecl(q))
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 60, 20, struct.pack(">H", 0) + shortstr(q) + shortstr("c1") + bits()
                  + table())
    x.note("consume", r.describe(r.read_frame()))
    x.do("delete queue from other conn", lambda ch: ch.queue_delete(q))
    x.note("consumer conn frames", r.events(timeout=1.0))
    r.close()


@scenario("connection close requeues unacked (redelivered, order)")
def _(x):
    q = N("cc")
    setup_msgs(x, q, 3)
    c = pika.BlockingConnection(params(x.port))
    ch = c.channel()
    ch.basic_get(q)
    ch.basic_get(q)
    c.close()
    time.sleep(0.2)
    x.do("drain", lambda ch: drain(ch, q))
    cleanup(x.port, [q])


@scenario("alternate exchange routing + mandatory")
def _(x):
    e, ae, q = N("ae-main"), N("ae"), N("aeq")
    x.do("declare ae", xdecl(ae, "fanout"))
    x.do("declare q", qdecl(q))
    x.do("bind", lambda ch: ch.queue_bind(q, ae))
    x.do("declare main with AE", xdecl(e, "direct", arguments={"alternate-exchange": ae}))
    x.do("declare main2 with missing AE", xdecl(N("ae-main2"), "direct",
                                                arguments={"alternate-exchange": N("noae")}))
    r = Raw(x.port)
    r.open_channel(1)
    r.publish(1, e, "nomatch", b"1", mandatory=True)
    r.publish(1, N("ae-main2"), "nomatch", b"2", mandatory=True)
    x.note("mandatory frames", r.events(timeout=1.0))
    r.close()
    x.do("depth of AE queue", qdecl(q, passive=True))
    cleanup(x.port, [q], [e, ae, N("ae-main2")])


@scenario("headers exchange matching (all/any, x- keys, void)")
def _(x):
    e = N("hx")
    x.do("declare", xdecl(e, "headers"))
    binds = {"all": {"x-match": "all", "a": "1", "b": "2"},
             "any": {"x-match": "any", "a": "1", "b": "2"},
             "default": {"a": "1"},
             "xkey-all": {"x-match": "all", "x-k": "1"},
             "xkey-allwithx": {"x-match": "all-with-x", "x-k": "1"},
             "int": {"x-match": "all", "n": 1}}
    for name, args in binds.items():
        q = N("hq-" + name)
        x.chan().queue_declare(q)
        x.chan().queue_bind(q, e, arguments=args)
    for hdrs in ({"a": "1"}, {"a": "1", "b": "2"}, {"x-k": "1"}, {"n": 1}, {"n": "1"}):
        for name in binds:
            x.chan().queue_purge(N("hq-" + name))
        x.chan().basic_publish(e, "", b"h", pika.BasicProperties(headers=hdrs))
        time.sleep(0.1)
        hit = [n for n in binds if x.chan().queue_declare(N("hq-" + n),
                                                          passive=True).method.message_count]
        x.note("headers %r routed to" % hdrs, hit)
    cleanup(x.port, [N("hq-" + n) for n in binds], [e])


@scenario("topic exchange edge cases")
def _(x):
    e = N("tx")
    x.do("declare", xdecl(e, "topic"))
    pats = ["#", "a.#", "a.*", "*.b", "a.#.b", "#.b", "a..b", "", "*"]
    for i, p in enumerate(pats):
        q = N("tq%d" % i)
        x.chan().queue_declare(q)
        x.chan().queue_bind(q, e, routing_key=p)
    for rk in ["a", "a.b", "a.x.b", "", "a..b", ".b", "b"]:
        for i in range(len(pats)):
            x.chan().queue_purge(N("tq%d" % i))
        x.chan().basic_publish(e, rk, b"t")
        time.sleep(0.05)
        hit = [pats[i] for i in range(len(pats)) if x.chan().queue_declare(
            N("tq%d" % i), passive=True).method.message_count]
        x.note("rk %r matched" % rk, hit)
    cleanup(x.port, [N("tq%d" % i) for i in range(len(pats))], [e])


@scenario("exchange-to-exchange binding routing + delete source")
def _(x):
    a, b, q = N("e2e-a"), N("e2e-b"), N("e2eq")
    x.do("declare a", xdecl(a, "direct"))
    x.do("declare b", xdecl(b, "fanout"))
    x.do("declare q", qdecl(q))
    x.do("bind q to b", lambda ch: ch.queue_bind(q, b))
    x.do("bind b to a rk=k", lambda ch: ch.exchange_bind(b, a, routing_key="k"))
    x.do("bind b to a rk=k again (idempotent)", lambda ch: ch.exchange_bind(b, a, routing_key="k"))
    x.chan().basic_publish(a, "k", b"1")
    x.chan().basic_publish(a, "other", b"2")
    time.sleep(0.1)
    x.do("drain", lambda ch: drain(ch, q))
    x.do("delete b if_unused (is destination only)", lambda ch: ch.exchange_delete(b, if_unused=True))
    x.do("delete a if_unused (source of e2e)", lambda ch: ch.exchange_delete(a, if_unused=True))
    cleanup(x.port, [q], [a, b])


@scenario("x-message-ttl boundary values")
def _(x):
    for v in (2 ** 31 - 1, 2 ** 32 - 1, 315360000000, 315360000001, 2 ** 63 - 1):
        bad_queue_arg({"x-message-ttl": v})(x)
    for v in (2 ** 31 - 1, 2 ** 32, 315360000001):
        bad_queue_arg({"x-expires": v})(x)


@scenario("expiration property boundary values")
def _(x):
    q = N("expb")
    x.do("declare", qdecl(q))
    for e in ["0", "4294967295", "4294967296", "315360000000", "315360000001", "+5", "00010"]:
        x.do("expiration=%r" % e, lambda ch: ch.basic_publish(
            "", q, b"x", pika.BasicProperties(expiration=e)), barrier=True)
    cleanup(x.port, [q])


@scenario("single active consumer")
def _(x):
    q = N("sac")
    x.do("declare", qdecl(q, arguments={"x-single-active-consumer": True}))
    got = []
    ch = x.chan()
    ch.basic_consume(q, lambda c, m, p, b: got.append("c1"), consumer_tag="c1")
    ch.basic_consume(q, lambda c, m, p, b: got.append("c2"), consumer_tag="c2")
    for i in range(4):
        ch.basic_publish("", q, b"x")
    pump(x.c(), 0.5)
    x.note("deliveries", got)
    x.do("sac as string", qdecl(N("sac2"), arguments={"x-single-active-consumer": "true"}))
    cleanup(x.port, [q, N("sac2")])


@scenario("consumer priorities (x-priority)")
def _(x):
    q = N("cprio")
    x.do("declare", qdecl(q))
    got = []
    ch = x.chan()
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(q, lambda c, m, p, b: got.append("low"), consumer_tag="low",
                     arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: got.append("high"), consumer_tag="high",
                     arguments={"x-priority": 5})
    for i in range(4):
        ch.basic_publish("", q, b"x")
    pump(x.c(), 0.5)
    x.note("deliveries", got)
    cleanup(x.port, [q])


@scenario("queue.declare nowait + unknown x-args + max-length-bytes")
def _(x):
    q = N("nw")
    r = Raw(x.port)
    r.open_channel(1)
    r.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(q) + bits(False, False, False, False,
                                                                       True) + table())
    r.send_method(1, 50, 10, struct.pack(">H", 0) + shortstr(q) + bits(True) + table())
    x.note("nowait declare then passive", r.events(timeout=1.0))
    r.close()
    x.do("x-max-length-bytes=-1", qdecl(N("mlb"), arguments={"x-max-length-bytes": -1}))
    x.do("x-max-length string", qdecl(N("mlb"), arguments={"x-max-length": "5"}))
    x.do("x-dead-letter-exchange int", qdecl(N("mlb"), arguments={"x-dead-letter-exchange": 5}))
    x.do("x-queue-mode lazy", qdecl(N("mlb2"), arguments={"x-queue-mode": "lazy"}))
    x.do("x-queue-mode bogus", qdecl(N("mlb3"), arguments={"x-queue-mode": "bogus"}))
    cleanup(x.port, [q, N("mlb"), N("mlb2"), N("mlb3")])


# --------------------------------------------------------------------------------------------

def run_one(port, f):
    x = Ctx(port)
    try:
        f(x)
    except Exception as e:  # a probe crashed: record it as the outcome
        x.note("EXCEPTION", "%s: %s | %s" % (type(e).__name__, e,
                                             traceback.format_exc().splitlines()[-3].strip()))
    finally:
        x.close()
    return [normalize(o) for o in x.obs]


def server_version(port):
    try:
        c = pika.BlockingConnection(params(port))
        props = c._impl.server_properties
        c.close()
        return "%s %s" % (props.get("product"), props.get("version"))
    except Exception as e:
        return "? (%s)" % e


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    pa, pb = int(sys.argv[1]), int(sys.argv[2])
    filters = sys.argv[3:]
    print("A = port %d: %s" % (pa, server_version(pa)))
    print("B = port %d: %s" % (pb, server_version(pb)))
    print("run id %s\n" % RUN)
    mism = []
    total = 0
    for name, f in SCENARIOS:
        if filters and not any(s in name for s in filters):
            continue
        total += 1
        a = run_one(pa, f)
        b = run_one(pb, f)
        same = a == b
        if not same:
            mism.append(name)
        print("=" * 100)
        print("[%s] %s" % ("MATCH" if same else "DIFF ", name))
        n = max(len(a), len(b))
        for i in range(n):
            la = a[i] if i < len(a) else "<none>"
            lb = b[i] if i < len(b) else "<none>"
            if la == lb:
                print("   = %s" % la)
            else:
                print("   A %s" % la)
                print("   B %s" % lb)
        sys.stdout.flush()
    print("=" * 100)
    print("%d scenarios, %d differ:" % (total, len(mism)))
    for m in mism:
        print("  - " + m)


if __name__ == "__main__":
    main()
