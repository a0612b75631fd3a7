// Measures the UI with 10,000 queues (docs/ui.md "With 10,000 queues"): the API calls the
// overview and queues pages make, and the pages' load times in headless Chromium.
// Usage: node tests/ui/bench_10k.mjs [binary] (default target/release/hourglass). Not part of CI.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { api, startBroker } from "./broker.mjs";

const QUEUES = 10_000;
const DECLARE_CONCURRENCY = 8;
const SAMPLES = 10;
const binary = process.argv[2] ?? "target/release/hourglass";

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function timeApi(broker, path) {
  const times = [];
  let bytes = 0;
  for (let i = 0; i < SAMPLES; i++) {
    const t0 = performance.now();
    const response = await fetch(new URL(path, broker.url), {
      headers: { Authorization: `Basic ${Buffer.from("guest:guest").toString("base64")}` },
    });
    bytes = (await response.arrayBuffer()).byteLength;
    if (!response.ok) throw new Error(`${path}: ${response.status}`);
    times.push(performance.now() - t0);
  }
  return { path, ms: median(times), bytes };
}

const broker = await startBroker(binary);
const profile = mkdtempSync(join(tmpdir(), "hourglass-ui-bench-"));
try {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: DECLARE_CONCURRENCY }, async () => {
      while (next < QUEUES) {
        const i = next++;
        await api(broker, "PUT", `/api/queues/%2F/q-${String(i).padStart(5, "0")}`, { durable: false });
      }
    }),
  );
  console.error(`declared ${QUEUES} queues in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  for (let i = 0; i < 100; i++) {
    await api(broker, "POST", "/api/exchanges/%2F/amq.default/publish", {
      routing_key: `q-${String(i * 97).padStart(5, "0")}`, payload: "x", payload_encoding: "string", properties: {},
    });
  }
  const rows = [];
  for (const path of [
    "/api/overview",
    "/api/queues?page=1&page_size=100",
    "/api/queues?page=1&page_size=100&sort=messages&sort_reverse=true",
    "/api/queues?page=50&page_size=100&name=q-0",
    "/api/queues?page=1&page_size=500",
    "/api/queues",
  ]) rows.push(await timeApi(broker, path));

  const context = await chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(broker.url);
  await page.fill("#login input[name=username]", "guest");
  await page.fill("#login input[name=password]", "guest");
  await page.click("#login button[type=submit]");
  await page.locator("#whoami").waitFor();
  const pageTimes = { overview: [], queues: [], next: [] };
  for (let i = 0; i < 5; i++) {
    let t = performance.now();
    await page.goto(`${broker.url}#/`);
    await page.reload();
    await page.locator(".totals.objects .total", { hasText: "10,000" }).waitFor({ timeout: 30_000 });
    pageTimes.overview.push(performance.now() - t);
    t = performance.now();
    await page.goto(`${broker.url}#/queues`);
    await page.locator("a[href='#/queues/%2F/q-00099']").waitFor({ timeout: 30_000 });
    pageTimes.queues.push(performance.now() - t);
    t = performance.now();
    await page.click(".pager button:has-text('›')");
    await page.locator("a[href='#/queues/%2F/q-00199']").waitFor({ timeout: 30_000 });
    pageTimes.next.push(performance.now() - t);
  }
  await context.close();
  console.log("| API call (10,000 queues) | median of 10 | response |");
  console.log("|---|---|---|");
  for (const r of rows) console.log(`| \`GET ${r.path}\` | ${r.ms.toFixed(1)} ms | ${(r.bytes / 1024).toFixed(0)} KiB |`);
  console.log("\n| page (headless Chromium, 10,000 queues) | median of 5 |");
  console.log("|---|---|");
  console.log(`| overview: reload until the totals show 10,000 queues | ${median(pageTimes.overview).toFixed(0)} ms |`);
  console.log(`| queues: open until the first page of 100 rows shows | ${median(pageTimes.queues).toFixed(0)} ms |`);
  console.log(`| queues: next page | ${median(pageTimes.next).toFixed(0)} ms |`);
} finally {
  rmSync(profile, { recursive: true, force: true });
  await broker.stop();
}
