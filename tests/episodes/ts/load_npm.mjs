// Loads the pinned npm packages (package.json / package-lock.json next to this file) from outside the
// source tree: by default <repo>/.cache/ts-mcap, or MEGAHOUR_TS_MCAP_MODULES. Shared by the scripts here.

import { createRequire } from "node:module";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const modulesDir = resolve(
  process.env.MEGAHOUR_TS_MCAP_MODULES ?? join(here, "..", "..", "..", ".cache", "ts-mcap"),
);

export function fail(message) {
  process.stderr.write(`${basename(process.argv[1] ?? "node")}: ${message}\n`);
  process.exit(1);
}

export async function load(name) {
  const require = createRequire(join(modulesDir, "package.json"));
  let entry;
  try {
    entry = require.resolve(name);
  } catch {
    fail(`cannot find the npm package ${name} under ${modulesDir}; run "npm ci --prefix ${modulesDir}" with tests/episodes/ts/package.json and package-lock.json copied there`);
  }
  const mod = await import(pathToFileURL(entry).href);
  // require.resolve picks the CommonJS entry; imported from ESM, its module.exports is `default`.
  return { ...(mod.default ?? {}), ...mod };
}
