"""Celery over Hourglass's SQS endpoint (issue 26), configured as SQS users configure it for a local
SQS (ElasticMQ, LocalStack): kombu's `sqs://` transport with the endpoint in the broker URL and
`is_secure` off. A Celery worker (solo pool, a subprocess of this script) runs the tasks sent here:
`add.delay(2, 3)` comes back as 5 through Celery's file result backend (the worker's, not this
process's), then a burst of tasks all come back. Checked in Hourglass's HTTP API: the queue kombu
made over SQS is a durable Hourglass queue, it saw the publishes and the acks (kombu's
DeleteMessage), and nothing is left in it. Usage: celery_sqs.py AMQP_PORT (the SQS port in
SQS_PORT, the HTTP API's in HTTP_PORT); the worker imports this file as the module `celery_sqs`."""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from celery import Celery

QUEUE = "celery-sqs"
# Made by the test, inherited by the worker it starts: both read and write the same results.
RESULTS = os.environ.setdefault("CELERY_SQS_RESULTS", tempfile.mkdtemp(prefix="celery-sqs-results-"))

app = Celery("celery_sqs", broker=f"sqs://guest:guest@127.0.0.1:{os.environ['SQS_PORT']}",
             backend=f"file://{RESULTS}")
app.conf.update(
    broker_transport_options={"region": "us-east-1", "is_secure": False},
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=False,
    worker_hijack_root_logger=False,
)


@app.task(name="celery_sqs.add")
def add(x, y):
    return x + y


def api(path, method="GET"):
    request = urllib.request.Request(f"http://127.0.0.1:{os.environ['HTTP_PORT']}{path}", method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response) if method == "GET" else None


def main():
    started = time.monotonic()
    try:  # a queue left by an earlier run would carry its counts
        api(f"/api/queues/%2F/{QUEUE}", "DELETE")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e
    log = open(os.path.join(RESULTS, "worker.log"), "w+")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_sqs", "worker", "--pool=solo", "--concurrency=1",
         "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--hostname=celery-sqs@localhost"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    ok = False
    try:
        result = add.delay(2, 3)
        assert result.get(timeout=30) == 5, result.result
        assert result.successful(), result.state

        # A burst: more than one receive's worth (kombu asks for up to its prefetch per call).
        results = [add.delay(i, 100) for i in range(12)]
        assert [r.get(timeout=30) for r in results] == [i + 100 for i in range(12)]

        # The tasks went through Hourglass: the queue kombu made over SQS is one of its queues.
        queue = api(f"/api/queues/%2F/{QUEUE}")
        assert queue["name"] == QUEUE and queue["vhost"] == "/" and queue["durable"], queue
        # kombu deletes a message once its task is acked; the last DeleteMessage may trail the result.
        for _ in range(50):
            queue = api(f"/api/queues/%2F/{QUEUE}")
            stats = queue.get("message_stats", {})
            if queue["messages"] == 0 and stats.get("ack", 0) >= 13:
                break
            time.sleep(0.1)
        assert queue["messages"] == 0 and queue["messages_unacknowledged"] == 0, queue
        assert stats.get("publish", 0) == 13, stats
        assert stats.get("ack", 0) == 13, stats
        assert worker.poll() is None, f"the worker exited with {worker.returncode}"
        ok = True
    finally:
        worker.terminate()  # warm shutdown
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        if not ok:
            log.seek(0)
            sys.stderr.write(log.read())
        log.close()
        shutil.rmtree(RESULTS, ignore_errors=True)
    print(f"celery over SQS ok: 13 tasks through the queue {QUEUE} by a solo worker "
          f"({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
