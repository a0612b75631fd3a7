// Browser tests of the management UI (docs/ui.md): Debian's chromium driven by playwright-core,
// against the real binary on loopback. Run by tests/ui/run.sh (HOURGLASS_BIN names the binary;
// UI_SCREENSHOTS=1 also writes the screenshots in docs/, from the repository's root).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { api, seed, startBroker } from "./broker.mjs";

const BINARY = process.env.HOURGLASS_BIN ?? "target/debug/hourglass";
const SCREENSHOTS = process.env.UI_SCREENSHOTS === "1";
const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

let broker;
let context;
let page;
let profile;
/**
 * Console errors and uncaught exceptions; a 404 is allowed only while `missing` (a missing
 * object's page, or an action on something missing), a 400 only while `refusal` (an action the
 * API is expected to refuse).
 */
const problems = [];
let missing = false;
let refusal = false;

before(async () => {
  // With a secrets key, so access keys can be made (the access keys test).
  broker = await startBroker(BINARY, { secretsKey: true });
  await seed(broker);
  profile = mkdtempSync(join(tmpdir(), "hourglass-ui-profile-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(10_000);
  page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const notFound = /Failed to load resource: the server responded with a status of 404/.test(m.text());
    const badRequest = /Failed to load resource: the server responded with a status of 400/.test(m.text());
    if (!(missing && notFound) && !(refusal && badRequest)) problems.push(`console: ${m.text()}`);
  });
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
  await broker?.stop();
});

async function login(user, password, on = broker) {
  await page.goto(on.url);
  await page.fill("#login input[name=username]", user);
  await page.fill("#login input[name=password]", password);
  await page.click("#login button[type=submit]");
  await page.locator("#whoami").filter({ hasText: user }).waitFor();
}

/** Clears the status line, does `action`, and returns the status line it leads to. */
async function statusOf(action) {
  const line = page.locator("#status");
  if (await line.isVisible()) {
    await line.locator("button.close").click();
    await line.waitFor({ state: "detached" });
  }
  await action();
  await line.waitFor();
  return line.innerText();
}

const count = (name) => page.locator(`[data-count=${name}] .value`);

test("the page is a login form, and guest/guest logs in to the overview", async () => {
  await page.goto(broker.url);
  await page.locator("#login").waitFor();
  await login("guest", "guest");
  await page.locator("h1", { hasText: "Overview" }).waitFor();
  await page.locator(".total.delayed .value", { hasText: "2" }).waitFor();
  assert.equal(await page.locator("table.list td", { hasText: "amqp" }).count(), 1);
});

test("the overview draws each rate in its own small chart, and says what Total counts", async () => {
  // Six rates on one chart drew over each other (issue 25): one small chart each, as RabbitMQ's.
  const charts = page.locator("figure.chart.small");
  await charts.nth(5).waitFor();
  assert.equal(await charts.count(), 6);
  const captions = await page.locator("figure.chart.small figcaption").allInnerTexts();
  assert.deepEqual(captions, ["Publish /s", "Deliver / get /s", "Ack /s", "Redeliver /s", "Expire /s", "Dead-letter /s"]);
  // The overview's Total sits next to Delayed but does not include it: it says so.
  assert.match(await page.locator("[data-count=total]").innerText(), /ready \+ unacked \(not delayed\)/);
});

test("a page loaded now draws the broker's last minutes of rates at once", async () => {
  // Issue 39: the charts started empty at every page load and filled in only after two of the
  // page's own refreshes, though the broker keeps ten minutes of samples (docs/ui.md).
  await api(broker, "PUT", "/api/queues/%2F/charts", { durable: true });
  for (let i = 0; i < 20; i++) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "charts", payload: `c${i}`, payload_encoding: "string", properties: {},
    });
  }
  // The broker samples every 5 s: wait (at most 20 s) until it holds four samples of the publishes.
  const sampled = "/api/overview?msg_rates_age=600&msg_rates_incr=5";
  const deadline = Date.now() + 20_000;
  let samples = [];
  while (Date.now() < deadline) {
    samples = (await api(broker, "GET", sampled)).message_stats.publish_details.samples;
    if (samples.length >= 4 && samples[0].sample > samples[samples.length - 1].sample) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.ok(samples.length >= 4, `the broker sampled ${samples.length} times`);
  await page.goto(`${broker.url}#/queues`);
  await page.goto(`${broker.url}#/`);
  await page.reload();
  // Drawn from the page's first answer: well before its next refresh, 5 s later.
  const line = page.locator("figure.chart.small").first().locator("polyline");
  await line.waitFor({ timeout: 3_000 });
  const drawn = (await line.getAttribute("points")).trim().split(/\s+/).length;
  assert.ok(drawn >= samples.length - 1, `${drawn} points drawn for ${samples.length} samples`);
  assert.equal(await page.locator("text=The charts fill in").count(), 0);
  await api(broker, "DELETE", "/api/queues/%2F/charts");
});

test("definitions download as JSON, and an uploaded file is imported", async () => {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click("#export-definitions")]);
  const exported = JSON.parse(readFileSync(await download.path(), "utf8"));
  assert.ok(exported.queues.some((q) => q.name === "jobs"), "the export lists the seeded queue");
  const imported = { queues: [{ name: "from-file", vhost: "/", durable: true, auto_delete: false, arguments: {} }] };
  await page.setInputFiles("#definitions-file", {
    name: "defs.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(imported)),
  });
  assert.match(await statusOf(() => page.click("#import-definitions")), /imported/);
  assert.equal((await api(broker, "GET", "/api/queues/%2F/from-file")).name, "from-file");
  await api(broker, "DELETE", "/api/queues/%2F/from-file");
});

test("the exchanges page names an x-delayed-message exchange as such", async () => {
  await page.goto(`${broker.url}#/exchanges`);
  await page.fill(".controls input.filter", "later");
  await page.locator("table.list td", { hasText: "delayed message (direct)" }).waitFor();
  await page.click("a[href='#/exchanges/%2F/later']");
  assert.equal(await page.locator("#exchange-type").innerText(), "delayed message (direct)");
  await page.locator("table.list a[href='#/queues/%2F/jobs']").waitFor();
});

test("a queue's page shows its ready and delayed messages and the delay timeline", async () => {
  await page.goto(`${broker.url}#/queues`);
  await page.click("a[href='#/queues/%2F/jobs']");
  await page.locator("h1 .name", { hasText: "jobs" }).waitFor();
  await page.locator("[data-count=ready] .value", { hasText: "3" }).waitFor();
  assert.equal(await count("delayed").innerText(), "2");
  await page.locator("#delayed-messages tbody tr[data-id]").nth(1).waitFor();
  assert.equal(await page.locator("svg.timeline circle.delayed").count(), 2);
  assert.equal(await page.locator("svg.timeline rect.ttl").count(), 1);
  assert.match(await page.locator("#waiting-summary").innerText(), /3 ready messages expire from/);
  assert.match(await page.locator("#dead-lettering").innerText(), /dlx/);
  // Issue 25: ticks at round offsets (the TTL band ends about 1 h out: every 30 min), not at
  // quarters of the span (+15m 45s), and times carry their zone.
  const ticks = await page.locator("svg.timeline text.tick").allTextContents();
  assert.deepEqual(ticks, ["now", "+30m", "+1h", "+1h 30m"]);
  const due = await page.locator("#delayed-messages tbody tr[data-id] td").nth(1).innerText();
  assert.match(due, /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC([+-]\d{2}:\d{2})?$/);
  assert.match(await page.locator("#waiting-summary").innerText(), /UTC/);
  // The Total card says it leaves the delayed messages out.
  assert.match(await page.locator("[data-count=total] .sub").innerText(), /ready \+ unacked \(not delayed\)/);
});

test("cancelling a delayed message removes it; rescheduling the other to now makes it ready", async () => {
  const rows = page.locator("#delayed-messages tbody tr[data-id]");
  assert.match(await statusOf(() => rows.first().locator("button.cancel").click()), /cancelled/);
  await page.locator("[data-count=delayed] .value", { hasText: "1" }).waitFor();
  await page.locator("#delayed-messages tbody tr[data-id]").nth(1).waitFor({ state: "detached" });
  await rows.first().locator("input.delay").fill("0");
  await rows.first().locator("button.reschedule").click();
  await page.locator("[data-count=delayed] .value", { hasText: "0" }).waitFor();
  await page.locator("[data-count=ready] .value", { hasText: "4" }).waitFor();
  const queue = await api(broker, "GET", "/api/queues/%2F/jobs");
  assert.deepEqual([queue.messages_ready, queue.messages_delayed], [4, 0]);
});

test("delayed messages are listed with their message id, and cancelled and rescheduled by it", async () => {
  // Issue 23: x-delivery-delay delays every message published into the queue (10 min).
  await api(broker, "PUT", "/api/queues/%2F/by-id", { arguments: { "x-delivery-delay": 600_000 } });
  try {
    await byMessageId();
  } finally {
    // Off its page first: the page polls the queue, and a poll after the delete is a 404.
    await page.goto(`${broker.url}#/`);
    await page.locator("h1", { hasText: "Overview" }).waitFor();
    missing = false;
    // Gone whatever happened: the queues list test counts the queues.
    await api(broker, "DELETE", "/api/queues/%2F/by-id");
  }
});

async function byMessageId() {
  for (const [payload, id] of [["first", "order-1"], ["second", "order-1"], ["other", "order-2"]]) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "by-id", payload, payload_encoding: "string", properties: { message_id: id },
    });
  }
  await page.goto(`${broker.url}#/queues/%2F/by-id`);
  await page.locator("h1 .name", { hasText: "by-id" }).waitFor();
  const rows = page.locator("#delayed-messages tbody tr[data-id]");
  await rows.nth(2).waitFor();
  assert.deepEqual((await rows.locator("td.message-id").allInnerTexts()).sort(), ["order-1", "order-1", "order-2"]);
  const form = page.locator("#delayed-by-message-id");
  assert.equal(await form.locator("button.cancel-by-id").isDisabled(), true, "nothing to act on without an id");
  await form.locator("input[name=message_id]").fill("order-1");
  assert.match(
    await statusOf(() => form.locator("button.cancel-by-id").click()),
    /^Message id order-1: cancelled 2 delayed messages\b/,
  );
  await page.locator("[data-count=delayed] .value", { hasText: "1" }).waitFor();
  await rows.nth(1).waitFor({ state: "detached" });
  assert.deepEqual(await rows.locator("td.message-id").allInnerTexts(), ["order-2"]);
  assert.match(await rows.first().locator("td.payload").innerText(), /^other /);
  const left = await api(broker, "GET", "/api/queues/%2F/by-id/delayed");
  assert.deepEqual(left.map((d) => d.properties.message_id), ["order-2"]);
  // None has it now: the API's 404 (a console error, allowed here), said as such; nothing changed.
  missing = true;
  assert.match(
    await statusOf(() => form.locator("button.cancel-by-id").click()),
    /^no delayed message has message id order-1\b/,
  );
  await page.locator("#status.error").waitFor();
  assert.equal((await api(broker, "GET", "/api/queues/%2F/by-id")).messages_delayed, 1);
  // Rescheduling by id, as the per-message control: 0 s = ready now.
  await form.locator("input[name=message_id]").fill("order-2");
  await form.locator("input[name=delay]").fill("0");
  assert.match(
    await statusOf(() => form.locator("button.reschedule-by-id").click()),
    /^Message id order-2: rescheduled 1 delayed message, due now\b/,
  );
  await page.locator("[data-count=delayed] .value", { hasText: "0" }).waitFor();
  await page.locator("[data-count=ready] .value", { hasText: "1" }).waitFor();
  const queue = await api(broker, "GET", "/api/queues/%2F/by-id");
  assert.deepEqual([queue.messages_ready, queue.messages_delayed], [1, 0]);
  assert.match(
    await statusOf(() => form.locator("button.reschedule-by-id").click()),
    /^no delayed message has message id order-2\b/,
  );
  missing = false;
}

test("a queue added in the UI takes a published message, and get shows it", async () => {
  await page.goto(`${broker.url}#/queues`);
  await page.fill("#add-queue input[name=name]", "ui-test");
  assert.match(await statusOf(() => page.click("#add-queue button[type=submit]")), /declared/);
  await page.goto(`${broker.url}#/queues/%2F/ui-test`);
  await page.fill("#publish-message textarea[name=payload]", "hello from the UI");
  assert.match(await statusOf(() => page.click("#publish-message button[type=submit]")), /published/);
  await page.locator("[data-count=ready] .value", { hasText: "1" }).waitFor();
  await page.selectOption("#get-messages select[name=ackmode]", "ack_requeue_false");
  await page.click("#get-messages button[type=submit]");
  await page.locator("table.got pre.payload", { hasText: "hello from the UI" }).waitFor();
  await page.locator("[data-count=ready] .value", { hasText: "0" }).waitFor();
  // No delayed exchange is bound here: nothing offers a delay (an x-delay header on the default
  // exchange does nothing).
  assert.equal(await page.locator("#publish-via").count(), 0);
  assert.equal(await page.locator("#publish-message input[name=delay]").count(), 0);
  const placeholder = await page.locator("#publish-message input[name=headers]").getAttribute("placeholder");
  assert.doesNotMatch(placeholder, /x-delay/);
});

test("the queues list pages, sorts and filters on the server, at once", async () => {
  for (let i = 0; i < 110; i++) {
    await api(broker, "PUT", `/api/queues/%2F/page-${String(i).padStart(3, "0")}`, { durable: false });
  }
  const asked = [];
  const listen = (r) => r.url().includes("/api/queues?") && asked.push(new URL(r.url()).searchParams);
  page.on("request", listen);
  // Natural order (vhost, name), 100 a page: jobs, page-000 … page-098 | page-099 … page-109, ui-test.
  await page.goto(`${broker.url}#/queues`);
  await page.locator(".pager", { hasText: "Page 1 of 2" }).waitFor();
  // A page change right after the list opens must load now, not at the next 5 s refresh...
  await page.click(".pager button:has-text('›')");
  await page.locator("a[href='#/queues/%2F/page-109']").waitFor({ timeout: 2_000 });
  // ... and stay: nothing (such as the filter's 300 ms debounce starting) may put page 1 back.
  await page.waitForTimeout(600);
  assert.equal(await page.locator("a[href='#/queues/%2F/page-109']").count(), 1);
  assert.equal(await page.locator("a[href='#/queues/%2F/page-098']").count(), 0);
  await page.fill(".controls input.filter", "page-10");
  await page.locator(".pager", { hasText: "10 queues shown of 112" }).waitFor({ timeout: 2_000 });
  await page.click("th:has-text('Name')");
  await page.click("th:has-text('Name')");
  await page.locator("table.list tbody tr").first().filter({ hasText: "page-109" }).waitFor({ timeout: 2_000 });
  page.off("request", listen);
  const last = asked[asked.length - 1];
  assert.deepEqual(
    [last.get("page"), last.get("page_size"), last.get("name"), last.get("sort"), last.get("sort_reverse")],
    ["1", "100", "page-10", "name", "true"],
  );
});

test("a user is created and deleted", async () => {
  await page.goto(`${broker.url}#/users`);
  await page.fill("#add-user input[name=name]", "alice");
  await page.fill("#add-user input[name=password]", "s3cret");
  await page.fill("#add-user input[name=tags]", "management");
  await page.click("#add-user button[type=submit]");
  const del = page.locator("button.delete-user[data-user=alice]");
  await del.waitFor();
  await del.click();
  await del.waitFor({ state: "detached" });
  const users = await api(broker, "GET", "/api/users");
  assert.ok(!users.some((u) => u.name === "alice"));
});

test("tracing is switched on and off from the virtual hosts page", async () => {
  await page.goto(`${broker.url}#/vhosts`);
  const toggle = (state) => page.locator(`button.trace-vhost[data-vhost="/"][data-tracing=${state}]`);
  await toggle("off").click();
  await toggle("on").waitFor();
  assert.equal((await api(broker, "GET", "/api/vhosts/%2F")).tracing, true);
  await toggle("on").click();
  await toggle("off").waitFor();
  assert.equal((await api(broker, "GET", "/api/vhosts/%2F")).tracing, false);
});

test("a policy is created, applies to a queue, and is deleted", async () => {
  await page.goto(`${broker.url}#/policies`);
  await page.selectOption("#add-policy select[name=vhost]", "/");
  await page.fill("#add-policy input[name=name]", "ui-ttl");
  await page.fill("#add-policy input[name=pattern]", "^ui-");
  await page.selectOption("#add-policy select[name=applyTo]", "queues");
  await page.fill("#add-policy textarea[name=definition]", '{"message-ttl": 60000}');
  await page.click("#add-policy button[type=submit]");
  const del = page.locator("button.delete-policy[data-policy=ui-ttl]");
  await del.waitFor();
  const queue = await api(broker, "GET", "/api/queues/%2F/ui-test");
  assert.equal(queue.policy, "ui-ttl");
  await del.click();
  await del.waitFor({ state: "detached" });
  assert.deepEqual(await api(broker, "GET", "/api/policies"), []);
});

/** A date as the UI shows them: local time with its zone. */
const CLOCK = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC([+-]\d{2}:\d{2})?$/;

test("access keys: made on a user's page, the secret shown once, listed without it, revoked", async () => {
  await api(broker, "PUT", "/api/users/sqs-app", { password: "pw", tags: "" });
  await api(broker, "PUT", "/api/vhosts/keys-vh", {});
  const before = Date.now();
  await page.goto(`${broker.url}#/users`);
  await page.fill(".controls input.filter", "sqs-app");
  await page.click("a.user-link[href='#/users/sqs-app']");
  await page.locator("h1 .name", { hasText: "sqs-app" }).waitFor();
  await page.locator("#access-keys td.muted", { hasText: "no access keys" }).waitFor();
  // The vhost chooser offers the vhosts and starts at "/".
  await page.locator("#add-access-key select[name=vhost] option[value=keys-vh]").waitFor({ state: "attached" });
  assert.equal(await page.locator("#add-access-key select[name=vhost]").inputValue(), "/");

  assert.match(await statusOf(() => page.click("#add-access-key button[type=submit]")), /shown only once/);
  const shown = page.locator("#new-access-key");
  assert.match(await shown.innerText(), /will not be shown again/);
  const id = await page.locator("#new-key-id").innerText();
  const secret = await page.locator("#new-key-secret").innerText();
  assert.match(id, /^HGAK/);
  assert.ok(secret.length >= 20, `a secret: ${secret}`);
  // Listed with its vhost and date, never the secret.
  const row = page.locator(`#access-keys tr[data-key="${id}"]`);
  await row.waitFor();
  const cells = await row.locator("td").allInnerTexts();
  assert.equal(cells[0], id);
  assert.equal(cells[1], "/");
  assert.match(cells[2], CLOCK);
  assert.ok(!(await page.locator("#access-keys").innerText()).includes(secret), "the list shows no secret");
  let keys = await api(broker, "GET", "/api/users/sqs-app/access-keys");
  assert.equal(keys.length, 1);
  assert.equal(keys[0].access_key_id, id);
  assert.equal(keys[0].vhost ?? "/", "/");
  assert.ok(keys[0].created_ms >= before - 1000 && keys[0].created_ms <= Date.now() + 1000, JSON.stringify(keys));
  assert.ok(!JSON.stringify(keys).includes(secret), "the API lists no secret");

  // Hidden, and gone for good: a reload of the page does not bring it back.
  await page.click("#hide-new-key");
  await shown.waitFor({ state: "detached" });
  assert.ok(!(await page.content()).includes(secret));
  await page.reload();
  await row.waitFor();
  assert.equal(await shown.count(), 0);
  assert.ok(!(await page.content()).includes(secret));

  // A second key, in the vhost chosen. (An API without vhosts on keys answers without the
  // field: the UI shows "/", as it does for a missing one.)
  await page.selectOption("#add-access-key select[name=vhost]", "keys-vh");
  assert.match(await statusOf(() => page.click("#add-access-key button[type=submit]")), /shown only once/);
  const id2 = await page.locator("#new-key-id").innerText();
  assert.notEqual(id2, id);
  const row2 = page.locator(`#access-keys tr[data-key="${id2}"]`);
  await row2.waitFor();
  keys = await api(broker, "GET", "/api/users/sqs-app/access-keys");
  assert.deepEqual(keys.map((k) => k.access_key_id).sort(), [id, id2].sort());
  const second = keys.find((k) => k.access_key_id === id2);
  if ("vhost" in second) assert.equal(second.vhost, "keys-vh");
  assert.equal(await row2.locator("td").nth(1).innerText(), second.vhost ?? "/");
  // A third is refused (2 a user): the API's reason is on the status line.
  refusal = true;
  assert.match(await statusOf(() => page.click("#add-access-key button[type=submit]")), /^400 .*access keys/);
  refusal = false;
  // The refusal leaves the second key's secret shown, until that key is revoked below.
  assert.equal(await page.locator("#new-key-id").innerText(), id2);

  // Revoked: gone from the page and from the API.
  assert.match(await statusOf(() => page.click(`button.revoke-key[data-key="${id}"]`)), new RegExp(`${id} of sqs-app revoked`));
  await row.waitFor({ state: "detached" });
  keys = await api(broker, "GET", "/api/users/sqs-app/access-keys");
  assert.deepEqual(keys.map((k) => k.access_key_id), [id2]);
  await page.click(`button.revoke-key[data-key="${id2}"]`);
  await row2.waitFor({ state: "detached" });
  await shown.waitFor({ state: "detached" });
  await page.locator("#access-keys td.muted", { hasText: "no access keys" }).waitFor();
  assert.deepEqual(await api(broker, "GET", "/api/users/sqs-app/access-keys"), []);
});

test("access keys: without a secrets key the broker's reason is shown, and nothing is made", async () => {
  const plain = await startBroker(BINARY);
  try {
    await api(plain, "PUT", "/api/users/sqs-app", { password: "pw", tags: "" });
    await login("guest", "guest", plain);
    await page.goto(`${plain.url}#/users/sqs-app`);
    await page.locator("#access-keys td.muted", { hasText: "no access keys" }).waitFor();
    refusal = true;
    await page.click("#add-access-key button[type=submit]");
    await page.locator("#status", { hasText: "access keys need a secrets key" }).waitFor();
    refusal = false;
    assert.match(await page.locator("#status").innerText(), /^400 bad_request: access keys need a secrets key/);
    assert.equal(await page.locator("#new-access-key").count(), 0);
    assert.deepEqual(await api(plain, "GET", "/api/users/sqs-app/access-keys"), []);
  } finally {
    refusal = false;
    await plain.stop();
  }
  // Back to the first broker, still logged in there (sessionStorage is per origin).
  await page.goto(`${broker.url}#/users`);
  await page.locator("#whoami", { hasText: "guest" }).waitFor();
});

test("a missing queue's page says it does not exist", async () => {
  missing = true;
  await page.goto(`${broker.url}#/queues/%2F/no-such-queue`);
  const error = page.locator("p.error");
  await error.waitFor();
  assert.equal(await error.innerText(), "No queue no-such-queue in virtual host /: it does not exist, or was deleted.");
  await page.goto(`${broker.url}#/exchanges/%2F/no-such-exchange`);
  await page.locator("p.error", { hasText: "No exchange no-such-exchange in virtual host /" }).waitFor();
  await page.goto(`${broker.url}#/`);
  await page.locator("h1", { hasText: "Overview" }).waitFor();
  missing = false;
});

test("a queue's page publishes with a delay only through a delayed exchange bound to it", async () => {
  await page.goto(`${broker.url}#/queues/%2F/jobs`);
  await page.locator("[data-count=delayed] .value", { hasText: "0" }).waitFor();
  // The default exchange, first: no delay field.
  await page.locator("#publish-via select[name=via]").waitFor();
  assert.equal(await page.locator("#publish-message input[name=delay]").count(), 0);
  await page.selectOption("#publish-via select[name=via]", { label: "later (delayed message, key jobs)" });
  await page.fill("#publish-message input[name=delay]", "600000");
  await page.fill("#publish-message textarea[name=payload]", "later from the UI");
  assert.match(await statusOf(() => page.click("#publish-message button[type=submit]")), /delayed 600000 ms/);
  await page.locator("[data-count=delayed] .value", { hasText: "1" }).waitFor();
  const [delayed] = await api(broker, "GET", "/api/queues/%2F/jobs/delayed");
  assert.ok(delayed.due_in_ms > 500_000 && delayed.due_in_ms <= 600_000, JSON.stringify(delayed));
});

test("a delivery in flight gets more time from the in-flight table", async () => {
  await api(broker, "PUT", "/api/queues/%2F/vis", { arguments: { "x-visibility-timeout": 60_000 } });
  await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
    routing_key: "vis", payload: "hold me", payload_encoding: "string", properties: {},
  });
  const holder = spawn("python3", ["tests/ui/hold_deliveries.py", String(broker.amqpPort), "vis", "1"]);
  try {
    await new Promise((resolve, reject) => {
      holder.stdout.on("data", (d) => String(d).includes("holding") && resolve());
      holder.once("exit", (code) => reject(new Error(`hold_deliveries.py exited ${code}`)));
    });
    await page.goto(`${broker.url}#/queues/%2F/vis`);
    const row = page.locator("#in-flight tbody tr[data-handle]");
    await row.waitFor();
    await row.locator("input.visibility").fill("600");
    assert.match(await statusOf(() => row.locator("button.extend").click()), /comes back in 10m 0s/);
    const { deliveries } = await api(broker, "GET", "/api/queues/%2F/vis/in-flight");
    assert.ok(deliveries[0].visible_in_ms > 590_000, JSON.stringify(deliveries));
  } finally {
    holder.kill();
  }
});

test("a quorum queue's page shows ready messages per priority, the time settings in effect and a consumer timeout in flight", async () => {
  // Issue 39: RabbitMQ 4.3's quorum queue features, as its management UI shows them.
  await api(broker, "PUT", "/api/queues/%2F/qq", {
    durable: true,
    arguments: {
      "x-queue-type": "quorum", "x-consumer-timeout": 600_000,
      "x-delayed-retry-type": "returned", "x-delayed-retry-min": 1_000, "x-delayed-retry-max": 5_000,
    },
  });
  for (const priority of [9, 1, 9]) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "qq", payload: `p${priority}`, payload_encoding: "string", properties: { priority },
    });
  }
  await page.goto(`${broker.url}#/queues/%2F/qq`);
  await page.locator("#by-priority td", { hasText: "9: 2, 1: 1" }).waitFor();
  const setting = (label) => page.locator(`#effective-settings tr[data-setting='${label}'] td`).innerText();
  assert.equal(await setting("Consumer timeout"), "10m 0s");
  assert.equal(await setting("Delivery limit"), "20", "a quorum queue's default");
  assert.match(await setting("Delayed retry"), /^returned: 1.0s × returns, at most 5.0s$/);
  const holder = spawn("python3", ["tests/ui/hold_deliveries.py", String(broker.amqpPort), "qq", "1"]);
  try {
    await new Promise((resolve, reject) => {
      holder.stdout.on("data", (d) => String(d).includes("holding") && resolve());
      holder.once("exit", (code) => reject(new Error(`hold_deliveries.py exited ${code}`)));
    });
    await page.reload();
    const row = page.locator("#in-flight tbody tr");
    await row.locator("td.consumer-timeout", { hasText: "consumer timeout 10m 0s" }).waitFor();
    assert.equal(await row.locator("button.extend").count(), 0, "a consumer timeout is not steered by handle");
    await page.locator("#consumers td", { hasText: "10m 0s" }).waitFor();
  } finally {
    holder.kill();
  }
});

test("a monitoring user sees the queues, and what it may not do is disabled or not offered", async () => {
  await page.click("#logout");
  await page.locator("#login").waitFor();
  await login("watcher", "watcher");
  await page.goto(`${broker.url}#/queues`);
  await page.click("a[href='#/queues/%2F/jobs']");
  await page.locator("[data-count=ready] .value", { hasText: "4" }).waitFor();
  // Its permission entry in / grants nothing: the buttons are disabled, not refused by the API.
  await page.locator("#purge-queue[disabled]").waitFor();
  assert.equal(await page.locator("#delete-queue").isDisabled(), true);
  assert.match(await page.locator("#purge-queue").getAttribute("title"), /watcher may not purge jobs/);
  assert.equal(await page.locator("#get-messages button[type=submit]").isDisabled(), true);
  assert.equal(await page.locator("#publish-message button[type=submit]").isDisabled(), true);
  // Listing delayed messages and deliveries in flight needs read: not asked for, so not refused.
  await page.locator("#waiting-unreadable").waitFor();
  assert.equal(await page.locator("#delayed-by-message-id button.cancel-by-id").isDisabled(), true);
  assert.equal(await page.locator("#delayed-by-message-id button.reschedule-by-id").isDisabled(), true);
  await page.goto(`${broker.url}#/users`);
  await page.locator("#users-admin-only").waitFor();
  assert.equal(await page.locator("#add-user").count(), 0);
  // A user's page, with its access keys, is for administrators too: nothing is asked for.
  await page.goto(`${broker.url}#/users/watcher`);
  await page.locator("#users-admin-only").waitFor();
  assert.equal(await page.locator("#access-keys").count(), 0);
  await page.goto(`${broker.url}#/policies`);
  await page.locator("#policies-read-only").waitFor();
  assert.equal(await page.locator("#add-policy").count(), 0);
  await page.goto(`${broker.url}#/vhosts`);
  await page.locator("#vhosts-read-only").waitFor();
  assert.equal(await page.locator("#add-vhost").count(), 0);
  await page.locator('button.trace-vhost[data-vhost="/"][disabled]').waitFor();
  await page.goto(`${broker.url}#/`);
  assert.equal(await page.locator("#import-definitions").isDisabled(), true);
  // Nothing was tried: no status line with a refusal, nothing changed.
  assert.equal(await page.locator("#status").count(), 0);
  const queue = await api(broker, "GET", "/api/queues/%2F/jobs");
  assert.equal(queue.messages_ready, 4, "nothing purged or deleted");
});

test("screenshots for docs/ (UI_SCREENSHOTS=1)", { skip: !SCREENSHOTS }, async () => {
  await page.click("#logout");
  await login("guest", "guest");
  await page.goto(`${broker.url}#/`);
  // Traffic for the charts: publishes, gets with ack and requeue, for three 5 s refreshes.
  const until = Date.now() + 16_000;
  for (let i = 0; Date.now() < until; i++) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "ui-test", payload: `m${i}`, payload_encoding: "string", properties: {},
    });
    if (i % 3 === 0) {
      const ackmode = i % 2 ? "ack_requeue_true" : "ack_requeue_false";
      await api(broker, "POST", "/api/queues/%2F/ui-test/get", { count: 2, ackmode, encoding: "auto" });
    }
    await new Promise((r) => setTimeout(r, 40));
  }
  await page.screenshot({ path: "docs/ui-overview.png" });
  await queueScreenshot();
});

/** A queue with ready, delayed and in-flight messages (held by a pika consumer) for docs/. */
async function queueScreenshot() {
  await api(broker, "PUT", "/api/queues/%2F/orders", {
    arguments: { "x-message-ttl": 1_800_000, "x-dead-letter-exchange": "dlx", "x-visibility-timeout": 300_000 },
  });
  await api(broker, "POST", "/api/bindings/%2F/e/later/q/orders", { routing_key: "orders" });
  for (let i = 1; i <= 7; i++) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: "orders", payload: `{"order": ${i}}`, payload_encoding: "string",
      properties: { expiration: String(i * 4 * 60_000) },
    });
  }
  for (const minutes of [2, 4, 7, 11, 12, 18, 25]) {
    await api(broker, "POST", "/api/exchanges/%2F/later/publish", {
      routing_key: "orders",
      payload: `{"reminder": "${minutes} min"}`,
      payload_encoding: "string",
      properties: { headers: { "x-delay": minutes * 60_000 } },
    });
  }
  const holder = spawn("python3", ["tests/ui/hold_deliveries.py", String(broker.amqpPort), "orders", "3"]);
  try {
    await new Promise((resolve, reject) => {
      holder.stdout.on("data", (d) => String(d).includes("holding") && resolve());
      holder.once("exit", (code) => reject(new Error(`hold_deliveries.py exited ${code}`)));
    });
    await page.goto(`${broker.url}#/queues/%2F/orders`);
    await page.locator("svg.timeline circle.inflight").nth(2).waitFor();
    await page.screenshot({ path: "docs/ui-queue.png" });
  } finally {
    holder.kill();
  }
}

test("no JavaScript errors in the console during the run", () => {
  assert.deepEqual(problems, [], problems.join("\n"));
});
