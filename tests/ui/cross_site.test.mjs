// A cross-site form in a real browser (issue #22, finding 5; docs/security.md "Cross-site
// requests"): a page served from another origin (another loopback port) auto-submits a
// `text/plain` form whose body is a definitions document creating an administrator, while the
// browser holds a Basic login for the broker. Before the fix the browser answered the API's
// challenge with the cached login and the user was created; now the API refuses the form (403:
// foreign Origin) and nothing changes. Run by tests/ui/run.sh.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { api, startBroker } from "./broker.mjs";

const BINARY = process.env.HOURGLASS_BIN ?? "target/debug/hourglass";
const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

/** The form field's name is the JSON up to `"x":"`, its value closes it: `text/plain` sends `name=value`. */
const FIELD_NAME = '{"users":[{"name":"mallory","password":"pw","tags":"administrator"}],"x":"';
const FIELD_VALUE = 'y"}';

let broker;
let browser;
let evil;

/** The attacker's page, on its own loopback port: a form that submits itself on load. */
function evilPage(target) {
  const attr = (s) => s.replaceAll("&", "&amp;").replaceAll('"', "&quot;");
  return `<!doctype html><html><body>
<form id="f" method="POST" action="${attr(target)}" enctype="text/plain">
<input type="hidden" name="${attr(FIELD_NAME)}" value="${attr(FIELD_VALUE)}">
</form>
<script>document.getElementById("f").submit();</script>
</body></html>`;
}

before(async () => {
  broker = await startBroker(BINARY);
  const target = new URL("api/definitions", broker.url).href;
  evil = createServer((_, response) => {
    response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    response.end(evilPage(target));
  });
  await new Promise((resolve) => evil.listen(0, "127.0.0.1", resolve));
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: CHROMIUM_ARGS });
});

after(async () => {
  await browser?.close();
  await new Promise((resolve) => (evil ? evil.close(resolve) : resolve()));
  await broker?.stop();
});

test("a cross-site text/plain form posted with a cached Basic login creates no user", async () => {
  // The browser answers Basic challenges with guest/guest, as after a login in its own prompt.
  const context = await browser.newContext({ httpCredentials: { username: "guest", password: "guest" } });
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    // The login is there: the API answers this browser as guest.
    const whoami = await page.goto(new URL("api/whoami", broker.url).href);
    assert.equal(whoami.status(), 200);
    assert.match(await whoami.text(), /"name":"guest"/);

    // The form replaces the page as soon as it loads; its answer (after any login challenge the
    // browser answers itself) is what counts. A 204 aborts the navigation, so wait for the answer.
    const target = new URL("api/definitions", broker.url).href;
    const answered = page.waitForResponse(
      (r) => r.url() === target && r.request().method() === "POST" && r.status() !== 401,
    );
    const { port } = evil.address();
    await page.goto(`http://127.0.0.1:${port}/`, { waitUntil: "commit" });
    const answer = await answered;

    const users = await api(broker, "GET", "/api/users");
    assert.deepEqual(users.map((u) => u.name).filter((n) => n === "mallory"), [], "the cross-site form created the user");
    assert.equal(answer.status(), 403, await answer.text().catch(() => ""));
  } finally {
    await context.close();
  }
});
