// Starts the hourglass binary on free loopback ports with a temporary data dir, and talks to its
// API (to seed data) — used by ui.test.mjs. Stops only the process it started.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Waiting for the broker to answer: at most this many tries, 100 ms apart. */
const START_TRIES = 300;

async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * `secretsKey`: start with `--secrets-key-file` (made by the broker, in a temporary folder of its
 * own: it must be outside the data directory), so access keys can be made.
 */
export async function startBroker(binary, { secretsKey = false } = {}) {
  const [amqp, http, metrics] = [await freePort(), await freePort(), await freePort()];
  const dataDir = mkdtempSync(join(tmpdir(), "hourglass-ui-data-"));
  const secretsDir = secretsKey ? mkdtempSync(join(tmpdir(), "hourglass-ui-secrets-")) : null;
  const args = ["--bind", "127.0.0.1", "--amqp-port", String(amqp), "--http-port", String(http), "--metrics-port",
    String(metrics), "--data-dir", dataDir];
  if (secretsDir) args.push("--secrets-key-file", join(secretsDir, "secrets.key"));
  const child = spawn(binary, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr.on("data", (d) => (log = (log + d).slice(-20000)));
  const broker = {
    url: `http://127.0.0.1:${http}/`,
    amqpPort: amqp,
    log: () => log,
    async stop() {
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        await new Promise((r) => child.once("exit", r));
      }
      rmSync(dataDir, { recursive: true, force: true });
      if (secretsDir) rmSync(secretsDir, { recursive: true, force: true });
    },
  };
  for (let i = 0; i < START_TRIES; i++) {
    if (child.exitCode !== null) throw new Error(`broker exited: ${log}`);
    try {
      await api(broker, "GET", "/api/overview");
      return broker;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await broker.stop();
  throw new Error(`broker did not answer: ${log}`);
}

export async function api(broker, method, path, body, user = "guest", password = "guest") {
  const response = await fetch(new URL(path, broker.url), {
    method,
    headers: {
      Authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`,
      "Content-Type": "application/json",
    },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/**
 * What the tests look at: queue `jobs` (TTL 1 h, dead-lettering to `dlx`) with 3 ready messages
 * and 2 delayed ones (through the x-delayed-message exchange `later`, due in 10 and 20 min),
 * and a `monitoring` user `watcher` whose permission entry in `/` grants nothing: as in RabbitMQ,
 * the entry lets it see the vhost's objects, and the empty patterns refuse every operation.
 */
export async function seed(broker) {
  await api(broker, "PUT", "/api/exchanges/%2F/dlx", { type: "fanout" });
  await api(broker, "PUT", "/api/queues/%2F/jobs", {
    arguments: { "x-message-ttl": 3_600_000, "x-dead-letter-exchange": "dlx" },
  });
  await api(broker, "PUT", "/api/exchanges/%2F/later", {
    type: "x-delayed-message",
    arguments: { "x-delayed-type": "direct" },
  });
  await api(broker, "POST", "/api/bindings/%2F/e/later/q/jobs", { routing_key: "jobs" });
  for (let i = 1; i <= 3; i++) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "jobs", payload: `job ${i}`, payload_encoding: "string", properties: {},
    });
  }
  for (const minutes of [10, 20]) {
    await api(broker, "POST", "/api/exchanges/%2F/later/publish", {
      routing_key: "jobs",
      payload: `reminder in ${minutes} min`,
      payload_encoding: "string",
      properties: { headers: { "x-delay": minutes * 60_000 } },
    });
  }
  await api(broker, "PUT", "/api/users/watcher", { password: "watcher", tags: "monitoring" });
  await api(broker, "PUT", "/api/permissions/%2F/watcher", { configure: "", write: "", read: "" });
}
