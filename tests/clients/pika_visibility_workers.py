"""basic.get polling workers with pika on a queue with x-visibility-timeout, as a new user would
write them: several workers, one killed mid-message (SIGKILL, no ack). Every message is processed,
none is lost, and the killed worker's message is redelivered exactly once."""
import multiprocessing as mp
import os
import signal
import sys
import time

import pika

PORT = int(sys.argv[1])
QUEUE = "pika-visibility"
MESSAGES = 30


def connect():
    return pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=PORT))


def worker(name, results, deadline):
    conn = connect()
    ch = conn.channel()
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(QUEUE, auto_ack=False)
        if method is None:
            time.sleep(0.02)
            continue
        results.put((name, body.decode(), method.redelivered))
        ch.basic_ack(method.delivery_tag)
    conn.close()


def doomed(taken):
    conn = connect()
    ch = conn.channel()
    while True:
        method, props, body = ch.basic_get(QUEUE, auto_ack=False)
        if method is not None:
            taken.put(body.decode())
            time.sleep(3600)  # "processing" forever; the parent kills us


if __name__ == "__main__":
    conn = connect()
    ch = conn.channel()
    ch.queue_delete(QUEUE)
    ch.queue_declare(QUEUE, arguments={"x-visibility-timeout": 2000})
    taken = mp.Queue()
    victim = mp.Process(target=doomed, args=(taken,))
    victim.start()
    ch.basic_publish("", QUEUE, b"m-0")
    lost = taken.get(timeout=10)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    for i in range(1, MESSAGES):
        ch.basic_publish("", QUEUE, f"m-{i}".encode())
    results = mp.Queue()
    deadline = time.monotonic() + 8
    workers = [mp.Process(target=worker, args=(f"w{n}", results, deadline)) for n in range(3)]
    for w in workers:
        w.start()
    seen = []
    # Until the workers stop, not at the 30th result: a message coming back after its ack (2 s
    # later) would come after that.
    while any(w.is_alive() for w in workers) or not results.empty():
        try:
            seen.append(results.get(timeout=0.5))
        except Exception:
            pass
    for w in workers:
        w.join()
    bodies = sorted(b for _, b, _ in seen)
    assert bodies == sorted(f"m-{i}" for i in range(MESSAGES)), (len(bodies), bodies[:5])
    redelivered = [b for _, b, r in seen if r]
    assert redelivered == [lost], (redelivered, lost)
    ch.queue_delete(QUEUE)
    conn.close()
    print(f"pika visibility ok: {MESSAGES} processed once, {lost} redelivered once")
