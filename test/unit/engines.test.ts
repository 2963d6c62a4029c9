/**
 * The Node versions the project and its dependencies declare (`engines.node`, as recorded in
 * package-lock.json) against the Node this runs on. This differs by Node version, and the suite
 * runs on each (scripts/test-lts.sh): on the supported lines (22, 24) every declared range is
 * met; on Node 20, which Debian 12 machines fall back to (scripts/setup.sh warns), the project's
 * own `>=22` and `@nats-io/nuid`'s `>= 22.x` are not — npm's EBADENGINE warnings at install.
 * And the Docker image's Node is one the whole suite passed on, in its userland (docs/testing.md).
 */
import t from 'tap';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

/** npm's own range semantics (semver: installed with the test tools, which carry no types for it). */
const semver = createRequire(import.meta.url)('semver') as { satisfies(version: string, range: string, options?: { includePrerelease?: boolean }): boolean };

const ROOT = new URL('../../', import.meta.url);
const read = (file: string): string => readFileSync(new URL(file, ROOT), 'utf8');
const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
const lock = JSON.parse(read('package-lock.json')) as {
  packages: Record<string, { engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean }>;
};
const version = process.versions.node;
const supported = Number(version.split('.')[0]) >= 22;

/** Lock entries whose engines.node this Node does not meet ('' is the project itself). */
function unmet(): string[] {
  const out: string[] = [];
  for (const [path, p] of Object.entries(lock.packages)) {
    const range = p.engines && !Array.isArray(p.engines) ? p.engines.node : undefined;
    if (range && !semver.satisfies(version, range, { includePrerelease: true })) out.push(path === '' ? '(the project)' : path.replace(/^.*node_modules\//, ''));
  }
  return out;
}

t.test(`engines by Node version: Node ${version} is ${supported ? 'a supported line' : 'out of support'}`, async (t) => {
  t.equal(pkg.engines.node, '>=22', 'the project declares the supported lines');
  t.equal(semver.satisfies(version, pkg.engines.node), supported, `Node ${version} ${supported ? 'meets' : 'does not meet'} ${pkg.engines.node}`);
  t.same(semver.satisfies(version, '>=22'), supported);
  const out = unmet();
  if (supported) t.same(out, [], 'every package meets its declared Node range');
  else {
    t.comment(`declared ranges Node ${version} does not meet: ${out.join(', ')}`);
    t.ok(out.includes('(the project)'), "the project's own range");
    t.ok(out.includes('@nats-io/nuid'), "@nats-io/nuid's >= 22.x");
  }
});

t.test("the Docker image's Node is an exact release of a supported line on Debian 13, the one docs/testing.md names", async (t) => {
  const from = /^FROM node:((\d+)\.\d+\.\d+)-trixie-slim$/m.exec(read('Dockerfile'));
  t.ok(from, 'the Dockerfile names an exact Node release on Debian 13 (trixie)');
  if (!from) return;
  t.ok(['22', '24'].includes(from[2]!), `Node ${from[1]} is of a supported line`);
  t.ok(semver.satisfies(from[1]!, pkg.engines.node), `and meets ${pkg.engines.node}`);
  t.match(read('docs/testing.md'), `\`node:${from[1]}-trixie-slim\``, 'docs/testing.md names the image with the runs it passed');
});
