/**
 * docker-compose.yml as shipped (no Docker engine runs here, so what can be checked is
 * checked): read with the YAML-subset reader, it must
 * - run the roles as separate services whose ROLE values are the roles of docs/operations.md;
 * - give each service a health check, and the roles' dependencies `service_healthy`;
 * - use only environment variables the service reads (src/config.ts) and docs/operations.md
 *   documents (Configuration), spelled right, with every secret taken from .env (required
 *   `${VAR:?…}` references, no literal) — and the .env the snippet in docs/operations.md generates
 *   fills every one of them;
 * - make each role's environment one the service accepts: loadConfig() on it, with the
 *   generated .env, must not refuse it, and gives the role and the settings it needs;
 * - keep Redis on AOF, NATS on JetStream, ClickHouse on volumes;
 * - create the read-only analytics user with grants on the analytics views only
 *   (deploy/clickhouse/users.d/billing.xml, mounted into the ClickHouse server).
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseYamlSubset, type YamlValue } from '../helpers/yaml-subset.js';
import { ROLES, loadConfig } from '../../src/config.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const read = (p: string): string => readFileSync(path.join(ROOT, p), 'utf8');
type Obj = { [k: string]: YamlValue };
const obj = (v: YamlValue | undefined, what: string): Obj => {
  if (v === null || v === undefined || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${what}: not a mapping`);
  return v;
};
const list = (v: YamlValue | undefined): string[] => (Array.isArray(v) ? (v as string[]) : []);

const compose = obj(parseYamlSubset(read('docker-compose.yml')), 'docker-compose.yml');
const services = obj(compose.services, 'services');
const README = read('docs/operations.md'); // the roles, the settings and the .env snippet are documented there
const CONFIG_SRC = read('src/config.ts');
const APP_SERVICES = ['ingress', 'pipeline', 'dispatcher'] as const;
const env = (svc: string): Record<string, string> => {
  const e = obj(obj(services[svc], svc).environment, `${svc}.environment`);
  return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, String(v)]));
};

/** Names the service reads: every Reader call in src/config.ts. */
const configNames = new Set([...CONFIG_SRC.matchAll(/r\.(?:str|int|num|oneOf|urlList|url|prefix|optional)(?:<[^>]*>)?\('([A-Z0-9_]+)'/g)].map((m) => m[1]!));
/** Names docs/operations.md documents: first column of the Configuration table. */
const configSection = README.slice(README.indexOf('\n## Configuration'), README.indexOf('\n## ', README.indexOf('\n## Configuration') + 5));
const documented = new Set([...configSection.matchAll(/^\| ([^|]+)\|/gm)].flatMap((m) => [...m[1]!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((x) => x[1]!)));
const rolesSection = README.slice(README.indexOf('\n## Roles'), README.indexOf('\n## ', README.indexOf('\n## Roles') + 5));
const readmeRoles = [...rolesSection.matchAll(/^\| `([a-z]+)`/gm)].map((m) => m[1]!);

/** The .env the snippet in docs/operations.md generates (run with bash in a temporary directory). */
function generatedEnv(): Record<string, string> {
  const block = [...README.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => b.includes('openssl rand') && b.includes('.env'));
  if (!block) throw new Error('docs/operations.md: no ```sh block generating .env with openssl rand');
  const dir = mkdtempSync(path.join(tmpdir(), 'compose-env-'));
  try {
    execFileSync('bash', ['-euo', 'pipefail', '-c', block], { cwd: dir, stdio: 'pipe' });
    const text = readFileSync(path.join(dir, '.env'), 'utf8');
    return Object.fromEntries(text.split('\n').filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Compose's interpolation of ${VAR:?msg} (the only form used), from `vars`. */
function interpolate(s: string, vars: Record<string, string>): string {
  return s.replace(/\$\{([A-Z_][A-Z0-9_]*)(:\?[^}]*)?\}/g, (_, name: string) => {
    const v = vars[name];
    if (v === undefined || v === '') throw new Error(`${name} is not set`);
    return v;
  });
}

t.test('the YAML-subset reader refuses what it does not understand', async (t) => {
  t.same(parseYamlSubset('a:\n  b: "x: y" # c\n  c:\n    - p:q\n    - \'it\'\'s\'\n  d: ["1", "2"]\n  e:\n'), { a: { b: 'x: y', c: ['p:q', "it's"], d: ['1', '2'], e: null } });
  const bad: [string, RegExp][] = [
    ['a: &x 1\n', /outside the subset/],
    ['a: |\n  text\n', /outside the subset/],
    ['a: {b: 1}\n', /outside the subset/],
    ['a:\n  - b: 1\n', /a mapping where a scalar was expected/],
    ['a: 1\na: 2\n', /duplicate key a/],
    ['a:\n\tb: 1\n', /tab character/],
    ['a: 1\n  b: 2\n', /unexpected indentation/],
    ['a: [1, 2]\n', /flow list of strings only/],
    ['a: ["x"\n', /not JSON/],
    ['just text\n', /expected "key: value"/],
  ];
  for (const [src, re] of bad) t.throws(() => parseYamlSubset(src), re, JSON.stringify(src));
});

t.test('roles run as separate services with the documented ROLE values', async (t) => {
  t.same(readmeRoles, [...ROLES], 'the Roles table of docs/operations.md lists the roles src/config.ts accepts');
  for (const s of APP_SERVICES) {
    t.equal(env(s).ROLE, s, `${s}: ROLE=${s}`);
    t.ok(readmeRoles.includes(env(s).ROLE!), `${s}: a documented role`);
    t.equal(obj(services[s], s).image, 'usage-billing:local', `${s}: the one image`);
    t.equal(obj(services[s], s).build, '.', `${s}: built from the Dockerfile`);
  }
  t.ok(Number(obj(obj(services.ingress, 'ingress').deploy, 'deploy').replicas) >= 2, 'several ingress replicas');
  t.ok(Number(obj(obj(services.pipeline, 'pipeline').deploy, 'deploy').replicas) >= 2, 'several pipeline replicas');
  t.same(Object.keys(services).sort(), ['clickhouse', 'dispatcher', 'ingress', 'nats', 'pipeline', 'redis']);
  for (const s of ['redis', 'nats', 'clickhouse', 'pipeline', 'dispatcher']) t.notOk(obj(services[s], s).ports, `${s}: no published port`);
});

t.test('every service has a health check; the roles wait for healthy dependencies', async (t) => {
  for (const [name, svc] of Object.entries(services)) {
    const hc = obj(obj(svc, name).healthcheck, `${name}.healthcheck`);
    const test = list(hc.test);
    t.ok(test.length >= 2 && ['CMD', 'CMD-SHELL'].includes(test[0]!), `${name}: a health check command`);
  }
  for (const s of APP_SERVICES) t.match(list(obj(obj(services[s], s).healthcheck, 'hc').test).join(' '), /127\.0\.0\.1:8080\/readyz/, `${s}: health = /readyz of the role`);
  const needs: Record<string, string[]> = { ingress: ['clickhouse', 'nats', 'redis'], pipeline: ['clickhouse', 'nats'], dispatcher: ['nats'] };
  for (const [s, deps] of Object.entries(needs)) {
    const d = obj(obj(services[s], s).depends_on, `${s}.depends_on`);
    t.same(Object.keys(d).sort(), deps, `${s} depends on ${deps.join(', ')}`);
    for (const dep of deps) t.equal(obj(d[dep], dep).condition, 'service_healthy', `${s} waits until ${dep} is healthy`);
  }
});

t.test('environment: names the service reads and docs/operations.md documents; secrets only from .env', async (t) => {
  t.ok(configNames.size > 40, `src/config.ts reads ${configNames.size} settings`);
  for (const s of APP_SERVICES) {
    for (const [k, v] of Object.entries(env(s))) {
      t.ok(configNames.has(k), `${s}: ${k} is read by src/config.ts`);
      t.ok(documented.has(k), `${s}: ${k} is documented in docs/operations.md "Configuration"`);
      if (/PASSWORD|TOKEN|KEY/.test(k) || k === 'REDIS_URL') t.match(v, /\$\{[A-Z_]+:\?[^}]+\}/, `${s}: ${k} comes from .env, required`);
    }
    for (const [k, v] of Object.entries(env(s))) if (/^[A-Z_]+_URL$/.test(k)) t.ok(Object.hasOwn(services, new URL(v.replace(/\$\{[^}]+\}/g, 'x')).hostname), `${s}: ${k} points at a compose service`);
  }
  // Every reference anywhere in the file is the required form, and the documented .env fills it.
  const text = read('docker-compose.yml');
  const refs = [...text.matchAll(/\$\{([^}]*)\}/g)].map((m) => m[1]!);
  t.ok(refs.every((r) => /^[A-Z_][A-Z0-9_]*:\?.+$/.test(r)), 'every ${…} is ${VAR:?message}: compose refuses to start without it');
  const vars = new Set(refs.map((r) => r.slice(0, r.indexOf(':'))));
  const generated = generatedEnv();
  t.same(Object.keys(generated).sort(), [...vars].sort(), "the snippet in docs/operations.md generates exactly the variables the compose file needs");
  for (const [k, v] of Object.entries(generated)) t.match(v, /^[0-9a-f]{64}$/, `${k}: 32 random bytes in hex`);
  t.match(read('.gitignore'), /^\.env$/m, '.env is git-ignored');
  t.match(read('.dockerignore'), /^\.env$/m, '.env stays out of the image');
});

t.test("each role's environment is one the service accepts, with what the role needs", async (t) => {
  const vars = generatedEnv();
  const cfgOf = (s: string) => loadConfig(Object.fromEntries(Object.entries(env(s)).map(([k, v]) => [k, interpolate(v, vars)])), []);
  const ingress = cfgOf('ingress');
  t.equal(ingress.role, 'ingress');
  t.equal(ingress.operatorToken, vars.OPERATOR_TOKEN);
  t.ok(ingress.webhooks.encryptionKey?.length === 32, 'ingress: webhook routes on (WEBHOOK_ENCRYPTION_KEY)');
  t.equal(ingress.redisUrl, `redis://:${vars.REDIS_PASSWORD}@redis:6379`);
  t.equal(ingress.clickhouseUrl, 'http://clickhouse:8123', 'ingress: analytics on the server');
  t.ok(ingress.analytics.user && ingress.analytics.user !== ingress.clickhouseUser, 'ingress: analytics as a separate user');
  t.equal(ingress.analytics.password, vars.CLICKHOUSE_ANALYTICS_PASSWORD);
  const pipeline = cfgOf('pipeline');
  t.equal(pipeline.role, 'pipeline');
  t.equal(pipeline.clickhouseUrl, 'http://clickhouse:8123', 'pipeline: the server store (several pipeline processes need one)');
  t.equal(pipeline.clickhousePassword, vars.CLICKHOUSE_PASSWORD);
  const dispatcher = cfgOf('dispatcher');
  t.equal(dispatcher.role, 'dispatcher');
  t.ok(dispatcher.webhooks.encryptionKey?.equals(ingress.webhooks.encryptionKey!), 'dispatcher: the same key as the ingress (it opens the secrets the ingress sealed)');
  for (const c of [ingress, pipeline, dispatcher]) t.equal(c.port, 8080);
});

t.test('Redis on AOF, NATS with JetStream, data on named volumes', async (t) => {
  const declared = Object.keys(obj(compose.volumes, 'volumes'));
  const redis = list(obj(services.redis, 'redis').command).join(' ');
  t.match(redis, /--appendonly yes/, 'Redis: AOF');
  t.match(redis, /--requirepass \$\{REDIS_PASSWORD:\?/, 'Redis: a password from .env');
  const nats = list(obj(services.nats, 'nats').command);
  t.ok(nats.includes('-js'), 'NATS: JetStream');
  const storeDir = nats[nats.indexOf('-sd') + 1];
  const mounts: [string, string][] = [['redis', '/data'], ['nats', storeDir!], ['clickhouse', '/var/lib/clickhouse']];
  for (const [s, dir] of mounts) {
    const vol = list(obj(services[s], s).volumes).find((v) => v.split(':')[1] === dir);
    t.ok(vol && declared.includes(vol.split(':')[0]!), `${s}: ${dir} on a named volume`);
  }
});

t.test('ClickHouse: the writing user and the read-only analytics user, their profiles and grants', async (t) => {
  const ch = obj(services.clickhouse, 'clickhouse');
  const mount = list(ch.volumes).find((v) => v.includes('/etc/clickhouse-server/users.d/'));
  t.ok(mount, 'a users.d file is mounted');
  const [src] = mount!.split(':');
  t.ok(existsSync(path.join(ROOT, src!)), `${src} is in the repository`);
  const xml = read(src!);
  const ingress = env('ingress');
  const userBlock = (name: string): string => {
    const m = new RegExp(`<users>[\\s\\S]*?<${name}>([\\s\\S]*?)</${name}>`).exec(xml);
    if (!m) throw new Error(`no user ${name} in ${src}`);
    return m[1]!;
  };
  const profileBlock = (name: string): string => new RegExp(`<profiles>[\\s\\S]*?<${name}>([\\s\\S]*?)</${name}>`).exec(xml)?.[1] ?? '';
  const grants = (block: string): string[] => [...block.matchAll(/<query>([^<]+)<\/query>/g)].map((m) => m[1]!.trim());
  const chEnv = obj(ch.environment, 'clickhouse.environment');
  const passwordRef = (block: string): string => {
    const name = /<password from_env="([A-Z_]+)"\/>/.exec(block)?.[1];
    return String(chEnv[name ?? ''] ?? '');
  };

  const analyticsDb = loadConfig({ OPERATOR_TOKEN: 'x'.repeat(16) }, []).analytics.database;
  const reader = userBlock(ingress.CLICKHOUSE_ANALYTICS_USER!);
  t.same(grants(reader), [`GRANT SELECT ON ${analyticsDb}.*`], 'the analytics user may only read the analytics database (the views)');
  t.match(reader, `<default_database>${analyticsDb}</default_database>`, 'its current database holds only the views');
  const readerProfile = profileBlock(/<profile>([^<]+)<\/profile>/.exec(reader)![1]!);
  t.match(readerProfile, /<readonly>2<\/readonly>/, 'its profile is read-only (readonly=2: the per-query settings are allowed)');
  t.match(readerProfile, /<allow_ddl>0<\/allow_ddl>/);
  t.equal(passwordRef(reader), ingress.CLICKHOUSE_ANALYTICS_PASSWORD, 'its password is the one the ingress uses');

  const writer = userBlock(ingress.CLICKHOUSE_USER!);
  const storeDb = loadConfig({ OPERATOR_TOKEN: 'x'.repeat(16) }, []).clickhouseDatabase;
  t.same(grants(writer).sort(), [`GRANT ALL ON ${analyticsDb}.*`, `GRANT ALL ON ${storeDb}.*`], 'the writer owns the two databases the service creates, nothing else');
  t.match(profileBlock(/<profile>([^<]+)<\/profile>/.exec(writer)![1]!), /<default_normal_view_sql_security>DEFINER<\/default_normal_view_sql_security>/, "the writer's views read with the writer's rights");
  t.equal(passwordRef(writer), ingress.CLICKHOUSE_PASSWORD, 'its password is the one the roles use');
  t.equal(env('pipeline').CLICKHOUSE_USER, ingress.CLICKHOUSE_USER);
  t.match(userBlock('default'), /<networks replace="replace">\s*<ip>::1<\/ip>\s*<ip>127\.0\.0\.1<\/ip>\s*<\/networks>/, 'the default user: local connections only');
});
