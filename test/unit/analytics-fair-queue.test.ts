/**
 * The process-wide analytics queue: a width, a reserve for organizations holding no place,
 * one place for an organization in quarantine, the fewest-held first, and a wait bounded on
 * its own clock.
 */
import t from 'tap';
import fc from 'fast-check';
import { FairQueue } from '../../src/analytics/fair-queue.js';
import { ApiError } from '../../src/errors.js';

const FAR = 60_000;
const settle = () => new Promise<void>((r) => setImmediate(r));

/** Acquires and remembers whether (and when) the place was granted. */
function waiter(q: FairQueue, key: string, group: string, waitMs = FAR) {
  const w = { granted: false, release: undefined as (() => void) | undefined, error: undefined as unknown };
  const p = q.acquire(key, group, waitMs).then(
    (r) => {
      w.granted = true;
      w.release = r;
      return r;
    },
    (e: unknown) => {
      w.error = e;
      throw e;
    },
  );
  p.catch(() => undefined);
  return Object.assign(w, { p });
}

/** Releases every place, as the waits are served, until none waits (no timer left behind). */
async function drain(ws: ReturnType<typeof waiter>[]): Promise<void> {
  const done = new Set<(() => void) | undefined>();
  while (ws.some((w) => !w.granted && w.error === undefined)) {
    for (const w of ws) if (w.release && !done.has(w.release)) (done.add(w.release), w.release());
    await settle();
  }
  for (const w of ws) w.release?.();
}

t.test('one organization alone holds at most width − reserve; a new organization starts at once', async (t) => {
  const q = new FairQueue(8);
  t.equal(q.reserve, 4);
  const a = Array.from({ length: 6 }, () => waiter(q, 'A:live', 'A'));
  await settle();
  t.equal(a.filter((w) => w.granted).length, 4, 'A runs four, two wait');
  t.same(q.load, { running: 4, waiting: 2 });
  const b = [waiter(q, 'B:live', 'B'), waiter(q, 'B:live', 'B')];
  const c = waiter(q, 'C:test', 'C');
  await settle();
  t.same(
    [b[0]!.granted, b[1]!.granted, c.granted],
    [true, false, true],
    'B and C, holding none, each take a reserved place; B’s second waits',
  );
  const v = waiter(q, 'V:live', 'V');
  await settle();
  t.ok(v.granted, 'with three organizations busy, a fourth still starts at once');
  t.same(q.load, { running: 7, waiting: 3 });
  const last = waiter(q, 'W:live', 'W');
  await settle();
  t.ok(last.granted, 'the eighth place goes to a fifth organization');
  const late = waiter(q, 'X:live', 'X');
  await settle();
  t.notOk(late.granted, 'every place is busy only with reserve + 1 = 5 organizations holding one');
  a[0]!.release!();
  await settle();
  t.ok(late.granted, 'the place A frees goes to X, which holds none, before A’s and B’s waiting statements');
  t.notOk(a[4]!.granted || b[1]!.granted);
  await drain([...a, ...b, c, v, last, late]);
  t.same(q.load, { running: 0, waiting: 0 });
});

t.test('a freed place goes to the organization holding the fewest, in turn among equals', async (t) => {
  const q = new FairQueue(4);
  const order: string[] = [];
  const held: (() => void)[] = [];
  const grab = async (key: string, group: string) => held.push(await q.acquire(key, group, FAR));
  await grab('A:live', 'A');
  await grab('A:live', 'A');
  await grab('B:live', 'B');
  await grab('C:live', 'C');
  const wait = (key: string, group: string, tag: string) => q.acquire(key, group, FAR).then((r) => (order.push(tag), r));
  const a3 = wait('A:live', 'A', 'A3');
  const b2 = wait('B:live', 'B', 'B2');
  const d1 = wait('D:live', 'D', 'D1');
  const c2 = wait('C:test', 'C', 'C2');
  held[0]!(); // A holds one now, and 3 run: only D, holding none, may take the place (the others are past the reserve)
  await d1;
  t.same(order, ['D1']);
  held[1]!(); // A holds 0: running 3
  await settle();
  t.same(order, ['D1', 'A3'], 'A, holding none again, before B and C (each holding one)');
  held[2]!(); // B holds 0
  await settle();
  t.same(order, ['D1', 'A3', 'B2']);
  (await a3)();
  (await b2)();
  (await d1)();
  await settle();
  t.same(order, ['D1', 'A3', 'B2', 'C2']);
  (await c2)();
  held[3]!();
  t.same(q.load, { running: 0, waiting: 0 });
});

t.test('an organization in quarantine holds one place; its other statements wait holding none', async (t) => {
  const quarantined = new Set(['Q']);
  const q = new FairQueue(8, (g) => (quarantined.has(g) ? 1 : Infinity));
  const qs = Array.from({ length: 4 }, () => waiter(q, 'Q:live', 'Q'));
  const a = Array.from({ length: 4 }, () => waiter(q, 'A:live', 'A'));
  await settle();
  t.same(
    qs.map((w) => w.granted),
    [true, false, false, false],
  );
  t.equal(a.filter((w) => w.granted).length, 3, 'A takes places up to the reserve (Q holds one)');
  const v = waiter(q, 'V:live', 'V');
  await settle();
  t.ok(v.granted, 'another organization starts at once');
  t.same(q.load, { running: 5, waiting: 4 });
  qs[0]!.release!();
  await settle();
  t.ok(qs[1]!.granted && !qs[2]!.granted, 'the next of Q’s statements runs when its one place is free');
  quarantined.delete('Q');
  const poke = waiter(q, 'Z:live', 'Z');
  await settle();
  t.ok(poke.granted);
  t.notOk(qs[2]!.granted, 'out of quarantine Q is under the reserve like anyone');
  await drain([...qs, ...a, v, poke]);
  t.same(q.load, { running: 0, waiting: 0 });
});

t.test('a wait ends at its own bound: 429 when the organization holds places, 408 when others hold them all', async (t) => {
  const q = new FairQueue(2);
  const a = await q.acquire('A:live', 'A', FAR);
  const started = Date.now();
  const own = await q.acquire('A:live', 'A', 100).catch((e: unknown) => e);
  t.ok(own instanceof ApiError && own.code === 'CONCURRENCY_LIMIT_EXCEEDED' && own.status === 429, `A waited for its own statement: ${String(own)}`);
  t.same((own as ApiError).headers, {}, 'without Retry-After (spec 7.2)');
  t.ok(Date.now() - started >= 90, 'not before the bound');
  const b = await q.acquire('B:live', 'B', FAR);
  const other = await q.acquire('C:live', 'C', 100).catch((e: unknown) => e);
  t.ok(other instanceof ApiError && other.code === 'QUERY_TIMEOUT' && other.status === 408, String(other));
  t.match((other as ApiError).details, /waited 0\.1 s for a place/);
  t.same(q.load, { running: 2, waiting: 0 }, 'the waits left the queue');
  a();
  a();
  b();
  t.same(q.load, { running: 0, waiting: 0 }, 'a release counts once');
});

type Cmd = { kind: 'acquire'; org: number; mode: number } | { kind: 'release'; pick: number } | { kind: 'quarantine'; org: number };

t.test('invariants over any sequence of arrivals, releases and quarantines', async (t) => {
  const cmd: fc.Arbitrary<Cmd> = fc.oneof(
    { weight: 5, arbitrary: fc.record({ kind: fc.constant('acquire' as const), org: fc.nat(5), mode: fc.nat(1) }) },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('release' as const), pick: fc.nat(1_000) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('quarantine' as const), org: fc.nat(5) }) },
  );
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 2, max: 10 }), fc.array(cmd, { maxLength: 60 }), async (width, cmds) => {
      const quarantined = new Set<string>();
      const cap = (g: string) => (quarantined.has(g) ? 1 : Infinity);
      const q = new FairQueue(width, cap);
      type Req = { id: number; key: string; group: string; release?: () => void; done: boolean };
      const reqs: Req[] = [];
      const grants: Req[] = [];
      let seq = 0;
      const holding = () => {
        const m = new Map<string, number>();
        for (const r of reqs) if (r.release && !r.done) m.set(r.group, (m.get(r.group) ?? 0) + 1);
        return m;
      };
      const mayIn = (m: Map<string, number>, running: number, g: string) => {
        if (running >= width) return false;
        const h = m.get(g) ?? 0;
        return h === 0 || (h < cap(g) && running + 1 <= width - q.reserve);
      };
      for (const c of cmds) {
        const before = holding();
        let running = [...before.values()].reduce((a, b) => a + b, 0);
        const waitingBefore = reqs.filter((r) => !r.release);
        grants.length = 0;
        if (c.kind === 'acquire') {
          const group = `o${c.org}`;
          const r: Req = { id: seq++, key: `${group}:${c.mode}`, group, done: false };
          reqs.push(r);
          void q.acquire(r.key, group, FAR).then((rel) => {
            r.release = rel;
            grants.push(r);
          });
          waitingBefore.push(r);
        } else if (c.kind === 'release') {
          const held = reqs.filter((r) => r.release && !r.done);
          if (held.length > 0) {
            const r = held[c.pick % held.length]!;
            r.done = true;
            before.set(r.group, before.get(r.group)! - 1);
            running--;
            r.release!();
          }
        } else {
          const g = `o${c.org}`;
          if (quarantined.has(g)) quarantined.delete(g);
          else quarantined.add(g);
        }
        await settle();
        // Each grant went to a waiting organization holding the fewest among those that could
        // take a place then, to the earliest waiting request of its key.
        // The grants' .then callbacks run in the order their reactions were queued, not the order
        // the queue granted them (a request granted within its own acquire gets its callback
        // attached after an older waiter granted in the same turn): the queue's order is the
        // fewest-held first, so the grants are checked in that order (then by arrival).
        const waiting = new Set(waitingBefore);
        const heldAtStart = new Map(before);
        grants.sort((a, b) => (heldAtStart.get(a.group) ?? 0) - (heldAtStart.get(b.group) ?? 0) || a.id - b.id);
        for (const g of grants) {
          if (!mayIn(before, running, g.group)) throw new Error(`granted ${g.group} which could not take a place`);
          for (const w of waiting) {
            if (w.key === g.key && w.id < g.id) throw new Error(`${g.key}: served out of arrival order`);
            if (mayIn(before, running, w.group) && (before.get(w.group) ?? 0) < (before.get(g.group) ?? 0)) throw new Error(`${g.group} served before ${w.group}, which holds fewer`);
          }
          waiting.delete(g);
          before.set(g.group, (before.get(g.group) ?? 0) + 1);
          running++;
        }
        const now = holding();
        const total = [...now.values()].reduce((a, b) => a + b, 0);
        if (q.load.running !== total) throw new Error(`queue counts ${q.load.running} running, model ${total}`);
        if (total > width) throw new Error(`${total} running, width ${width}`);
        if (total > 0 && total - now.size > width - q.reserve - 1) throw new Error(`${total} places held by ${now.size} organizations`);
        for (const [g, n] of now) if (q.held(g) !== n) throw new Error(`${g} holds ${q.held(g)}, model ${n}`);
        // Work-conserving: after an arrival or a release, no waiting request could take a place.
        if (c.kind !== 'quarantine') for (const w of reqs.filter((r) => !r.release)) if (mayIn(now, total, w.group)) throw new Error(`${w.key} waits while it could take a place`);
      }
      for (const r of reqs) if (r.release && !r.done) r.release();
      // Everything waiting is served once all is released (no wait is lost).
      for (let i = 0; i < 200 && reqs.some((r) => !r.release || !r.done); i++) {
        await settle();
        for (const r of reqs) if (r.release && !r.done) (r.done = true), r.release();
        quarantined.clear();
        void q.acquire('poke', 'poke', FAR).then((rel) => rel());
      }
      await settle();
      if (reqs.some((r) => !r.done)) throw new Error('a request was never served');
    }),
    { numRuns: 1_000 },
  );
  t.end();
});
