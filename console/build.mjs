// Builds the console: openapi-typescript turns openapi.json into src/schema.d.ts, tsc checks every call against it
// (strict), esbuild bundles src/main.ts and openapi-fetch into one ES module. The same sources, spec and pinned
// packages give the same bytes: tests/test_console_build.py rebuilds it and compares with the committed file.
//
//   node build.mjs [--spec ../openapi.json] [--out ../handlers/console/assets/console.js]

import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const option = (name, fallback) => (args.includes(name) ? resolve(args[args.indexOf(name) + 1]) : fallback);
const spec = option("--spec", join(here, "..", "openapi.json"));
const out = option("--out", join(here, "..", "handlers", "console", "assets", "console.js"));
const bin = (name) => join(here, "node_modules", ".bin", name);
const fetchLicense = readFileSync(join(here, "node_modules", "openapi-fetch", "LICENSE"), "utf8").trim();

execFileSync(bin("openapi-typescript"), [spec, "-o", join(here, "src", "schema.d.ts")], { stdio: "inherit" });
execFileSync(bin("tsc"), ["-p", here], { stdio: "inherit" });
await build({
  entryPoints: [join(here, "src", "main.ts")],
  outfile: out,
  bundle: true,
  format: "esm",
  target: "es2022",
  charset: "utf8",
  legalComments: "none",
  logLevel: "warning",
  banner: {
    js: "// Built by `make console` from console/src -- do not edit (tests/test_console_build.py checks it).\n" +
      "// Bundles openapi-fetch 0.17.0:\n" + fetchLicense.split("\n").map((l) => `// ${l}`.trimEnd()).join("\n"),
  },
});
