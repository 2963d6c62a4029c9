/**
 * Realistic 500-signal batches (~136 KB of JSON with every signal keyed, ~116 KB keyless; data
 * has 6 fields), built as text from pre-serialized pieces
 * so a producer can make a fresh body (fresh idempotency keys) per request for a fraction of
 * a millisecond instead of JSON.stringify-ing 500 objects each time.
 */
export const SIGNALS_PER_BATCH = 500;

const EVENTS = ['llm.completion', 'llm.embedding', 'storage.write', 'api.request'];
const REGIONS = ['eu-west-1', 'us-east-1', 'ap-southeast-2'];
// Short model names and customer ids keep a batch within 4% of the size of the bench history's
// first entries, whose signals named their customer by a flat `"customerId":…` (21 bytes shorter
// than `"customer":{"externalCustomerId":…}`), so that ingest figures stay comparable along it.
const MODELS = ['gpt-4o-mini', 'claude-3-5-haiku', 'text-embedding-3-large'];

export interface BatchTemplateOptions {
  /** Which signals carry an idempotencyKey. */
  keyed: (i: number) => boolean;
  /** Timestamp of signal 0; signal i is i ms earlier (all well within the accepted range). */
  baseTimeMs: number;
}

/**
 * A batch with the keys left open: `render(keyOf)` returns the body with `keyOf(i)` as the
 * idempotencyKey of each keyed signal i (keys must be JSON-safe: letters, digits, "-", "_", ".").
 */
export class BatchTemplate {
  /** Text before the key of signal i (or the whole signal text when it has no key). */
  private readonly heads: string[] = [];
  private readonly tails: (string | null)[] = [];

  constructor(opts: BatchTemplateOptions) {
    for (let i = 0; i < SIGNALS_PER_BATCH; i++) {
      const head =
        `{"eventName":"${EVENTS[i % EVENTS.length]}","customer":{"externalCustomerId":"c${String((i * 7919) % 1000).padStart(3, '0')}"},` +
        `"timestamp":"${new Date(opts.baseTimeMs - i).toISOString()}",`;
      const data = JSON.stringify({
        region: REGIONS[i % REGIONS.length],
        model: MODELS[i % MODELS.length],
        tokensIn: 1000 + ((i * 37) % 4000),
        tokensOut: 100 + ((i * 13) % 900),
        latencyMs: 120.5 + ((i * 17) % 2000) / 4,
        cached: i % 5 === 0,
      });
      if (opts.keyed(i)) {
        this.heads.push(`${head}"idempotencyKey":"`);
        this.tails.push(`","data":${data}}`);
      } else {
        this.heads.push(`${head}"data":${data}}`);
        this.tails.push(null);
      }
    }
  }

  render(keyOf: (i: number) => string): string {
    const parts = new Array<string>(SIGNALS_PER_BATCH);
    for (let i = 0; i < SIGNALS_PER_BATCH; i++) {
      const tail = this.tails[i];
      parts[i] = tail === null || tail === undefined ? this.heads[i]! : this.heads[i]! + keyOf(i) + tail;
    }
    return `{"signals":[${parts.join(',')}]}`;
  }

  /** How many signals of a batch carry a key. */
  get keyedCount(): number {
    return this.tails.filter((t) => t !== null).length;
  }
}
