#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpora (fuzz/corpus/<target>/seed-*).

server_session inputs: a setup byte (bit 0/1: canned handshake on connection 1/2, bit 2:
persistence, bit 3: heartbeat 2 s), then steps, each a byte whose low three bits pick the kind
(0-2 raw bytes: length-1 then bytes; 3-4 canned frames: pick, param[, publish: flags, u16 LE
body size]; 5 clock advance: scale, amount; 6 fsync; 7 socket closed) and whose top bit picks
the connection. A canned frame's param gives channel 1 + param % 3, queue q[(param / 3) % 3],
a flag in bit 7; param 0 = channel 1, q0; 135 = channel 1, q0, flag set.
store_recovery and the other targets take any bytes: their seeds are a few fixed pseudo-random
inputs (a store of a few dozen records, a few damages).

Run from the repository root: python3 fuzz/gen_seeds.py
"""
import os
import random
import struct

OPEN, DECLARE, PUBLISH, CONSUME, GET, ACK, NACK, REJECT, CONFIRM, TX_SELECT, TX_COMMIT = range(11)
QOS, CLOSE, PURGE, DELETE, EXCHANGE, BIND, CANCEL, RECOVER = 12, 13, 14, 15, 16, 17, 18, 19


def canned(pick, param=0, conn=0):
    return bytes([3 | (conn << 7), pick, param])


def publish(param=0, flags=0x03, size=100, conn=0):
    return canned(PUBLISH, param, conn) + bytes([flags]) + struct.pack("<H", size)


def advance(scale, amount_bytes):
    return bytes([5, scale]) + amount_bytes


FSYNC = bytes([6])

SESSIONS = {
    # Confirmed persistent publishes to a durable queue, consumed and acked.
    "seed-confirm-consume-ack": bytes([0x07])
    + canned(OPEN) + canned(CONFIRM) + canned(DECLARE, 135)
    + publish() + publish(size=5000) + FSYNC
    + canned(CONSUME) + canned(ACK, 9) + canned(ACK, 18) + FSYNC,
    # A TTL queue on connection 2, a message that expires while the clock runs, then a get.
    "seed-ttl-expiry-get": bytes([0x03])
    + canned(OPEN, 1, 1) + canned(DECLARE, 2 + 3, 1) + publish(param=1 + 3, flags=0x05, conn=1)
    + advance(1, struct.pack("<H", 2000)) + canned(GET, 1 + 3, 1),
    # A topic exchange, a binding, a mandatory publish that returns, tx mode, nack, reject.
    "seed-topic-tx-nack": bytes([0x01])
    + canned(OPEN) + canned(EXCHANGE, 2) + canned(DECLARE) + canned(BIND, 0)
    + canned(TX_SELECT) + publish(flags=0x11) + canned(TX_COMMIT)
    + canned(GET) + canned(NACK, 0x40 + 9 - 9 % 3) + canned(GET) + canned(REJECT, 9)
    + canned(QOS, 2) + canned(PURGE) + canned(DELETE) + canned(CLOSE),
    # Heartbeats: the clock runs past two heartbeat intervals with no traffic.
    "seed-heartbeat-timeout": bytes([0x0B]) + canned(OPEN) + advance(2, struct.pack("<H", 5)),
    # Raw frames after the handshake: a heartbeat frame, then a channel.open by hand, then EOF.
    "seed-raw-frames": bytes([0x01])
    + bytes([0, 7]) + bytes([8, 0, 0, 0, 0, 0, 0, 0xCE])
    + bytes([0, 12]) + bytes([1, 0, 1, 0, 0, 0, 5, 0, 20, 0, 10, 0, 0xCE])[:13]
    + bytes([7]),
}


def write(target, name, data):
    path = os.path.join("fuzz", "corpus", target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


def main():
    for name, data in SESSIONS.items():
        write("server_session", name, data)
    rng = random.Random(12)
    for i, size in enumerate([48, 160, 400]):
        write("store_recovery", f"seed-{i}", bytes(rng.randrange(256) for _ in range(size)))


if __name__ == "__main__":
    main()
