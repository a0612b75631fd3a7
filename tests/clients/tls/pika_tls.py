"""pika over TLS against Hourglass: server authentication with PLAIN, EXTERNAL with a client
certificate (CN=guest), a plaintext client refused on the TLS port, and certificate reload on
SIGHUP (a new client sees the new certificate, an open connection keeps working).

Usage: pika_tls.py AMQPS_PORT CERT_DIR BROKER_PID; CERT_DIR from make_certs.sh, the broker
started with live.pem/live.key (copies of server.pem/key) as its certificate."""
import os
import shutil
import signal
import socket
import ssl
import sys
import time

import pika
from pika.credentials import ExternalCredentials, PlainCredentials

port, certs, broker_pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])


def context(client_cert=False):
    """Verifies the broker against the test CA (and its name, localhost); optionally presents
    the guest client certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=os.path.join(certs, "ca.pem"))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client_cert:
        ctx.load_cert_chain(os.path.join(certs, "guest.pem"), os.path.join(certs, "guest.key"))
    return ctx


def params(credentials, client_cert=False):
    return pika.ConnectionParameters(
        host="localhost", port=port, credentials=credentials, connection_attempts=1,
        socket_timeout=5, blocked_connection_timeout=5,
        ssl_options=pika.SSLOptions(context(client_cert), server_hostname="localhost"))


def round_trip(conn, queue, body):
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.basic_publish("", queue, body)
    for _ in range(50):
        method, _, got = ch.basic_get(queue, auto_ack=True)
        if method is not None:
            assert got == body, got
            return
        time.sleep(0.05)
    raise AssertionError("message not back")


def server_cn():
    """The CN of the certificate a new TLS client is shown."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context().wrap_socket(raw, server_hostname="localhost") as tls:
            subject = dict(item[0] for item in tls.getpeercert()["subject"])
            return subject["commonName"]


# Server authentication, PLAIN.
plain = pika.BlockingConnection(params(PlainCredentials("guest", "guest")))
round_trip(plain, "pika-tls-plain", b"over tls")

# EXTERNAL with the client certificate: no password anywhere.
external = pika.BlockingConnection(params(ExternalCredentials(), client_cert=True))
round_trip(external, "pika-tls-external", b"by certificate")
external.close()

# A plaintext AMQP client on the TLS port is refused, promptly.
started = time.monotonic()
try:
    pika.BlockingConnection(pika.ConnectionParameters(
        host="127.0.0.1", port=port, connection_attempts=1, socket_timeout=5, stack_timeout=10))
    raise AssertionError("a plaintext client got through on the TLS port")
except pika.exceptions.AMQPConnectionError:
    pass
assert time.monotonic() - started < 8, "refused at once, not after a timeout"

# Reload on SIGHUP: new handshakes get the new certificate, the open connection carries on.
assert server_cn() == "first"
shutil.copy(os.path.join(certs, "server2.pem"), os.path.join(certs, "live.pem"))
shutil.copy(os.path.join(certs, "server2.key"), os.path.join(certs, "live.key"))
os.kill(broker_pid, signal.SIGHUP)
for _ in range(100):
    if server_cn() == "second":
        break
    time.sleep(0.05)
assert server_cn() == "second", "the reloaded certificate is served"
round_trip(plain, "pika-tls-plain", b"still connected")
plain.close()
print("pika over TLS: server auth, EXTERNAL, plaintext refused, reload: ok")
