// Builds the UI into dist/ (committed; embedded by crates/mgmt/src/ui.rs), or with --check
// rebuilds into a temporary folder and fails unless the result equals the committed dist/.
// esbuild's output depends only on the sources and the locked versions, so equal bytes mean the
// committed files were built from these sources.
import { build } from "esbuild";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const here = new URL(".", import.meta.url).pathname;
const check = process.argv.includes("--check");
const out = check ? mkdtempSync(join(tmpdir(), "hourglass-ui-")) : join(here, "dist");

await build({
  entryPoints: [join(here, "src/main.tsx")],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "eof",
  charset: "utf8",
  outfile: join(out, "app.js"),
  logLevel: "warning",
});
copyFileSync(join(here, "src/index.html"), join(out, "index.html"));
copyFileSync(join(here, "src/app.css"), join(out, "app.css"));

const files = readdirSync(out).sort();
for (const f of files) {
  const size = readFileSync(join(out, f)).length;
  console.log(`${f.padEnd(12)} ${size} bytes`);
}
if (check) {
  const committed = readdirSync(join(here, "dist")).sort();
  const stale = files.filter(
    (f) => !committed.includes(f) || !readFileSync(join(out, f)).equals(readFileSync(join(here, "dist", f))),
  );
  const extra = committed.filter((f) => !files.includes(f));
  rmSync(out, { recursive: true, force: true });
  if (stale.length || extra.length) {
    console.error(`dist/ is not what the sources build: ${[...stale, ...extra].join(", ")}`);
    console.error("run: (cd crates/mgmt/ui && npm ci && npm run build) and commit dist/");
    process.exit(1);
  }
  console.log("dist/ matches the sources");
}
