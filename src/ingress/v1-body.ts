/**
 * The bus body of a legacy `POST /api/v1/usage` request: its signals in the v2 shape
 * (`{"signals":[…]}`, a refused one as null: the pipeline skips its index), each valid one's
 * `data` carried as the request's own text of it, so that numbers keep the exact digits the
 * producer sent (a double would not keep them all; src/pipeline/exact-numbers.ts reads them
 * from this text).
 */
const WS = new Set([' ', '\t', '\n', '\r']);

/** The index after the JSON value starting at `i` of a text known to be valid JSON. */
function skipValue(t: string, i: number): number {
  const c = t[i];
  if (c === '"') return skipString(t, i);
  if (c === '{' || c === '[') {
    let depth = 0;
    for (; i < t.length; i++) {
      const x = t[i];
      if (x === '"') i = skipString(t, i) - 1;
      else if (x === '{' || x === '[') depth++;
      else if (x === '}' || x === ']') {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    return i;
  }
  while (i < t.length && !WS.has(t[i]!) && t[i] !== ',' && t[i] !== '}' && t[i] !== ']') i++;
  return i;
}

function skipString(t: string, i: number): number {
  for (i++; i < t.length; i++) {
    const x = t[i];
    if (x === '\\') i++;
    else if (x === '"') return i + 1;
  }
  return i;
}

function ws(t: string, i: number): number {
  while (i < t.length && WS.has(t[i]!)) i++;
  return i;
}

/** The text of the `data` member of the object at `i` (its last one, as JSON.parse keeps), or null; non-objects: null. */
function dataOf(t: string, i: number): string | null {
  if (t[i] !== '{') return null;
  let found: string | null = null;
  i = ws(t, i + 1);
  while (t[i] === '"') {
    const keyEnd = skipString(t, i);
    const raw = t.slice(i, keyEnd);
    const key = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
    i = ws(t, ws(t, keyEnd) + 1);
    const end = skipValue(t, i);
    if (key === 'data') found = t.slice(i, end);
    i = ws(t, end);
    if (t[i] === ',') i = ws(t, i + 1);
  }
  return found;
}

/** The `data` text of each signal of a v1 body (an object, or an array of them), in order. */
export function v1DataTexts(text: string): (string | null)[] {
  let i = ws(text, 0);
  if (text[i] !== '[') return [dataOf(text, i)];
  const out: (string | null)[] = [];
  i = ws(text, i + 1);
  while (i < text.length && text[i] !== ']') {
    out.push(dataOf(text, i));
    i = ws(text, skipValue(text, i));
    if (text[i] === ',') i = ws(text, i + 1);
  }
  return out;
}

/** The v2 body of v1 signals (v2 shape, refused ones null), each valid one's `data` as `dataTexts` gives it. */
export function v1Body(signals: readonly unknown[], dataTexts: readonly (string | null)[]): Buffer {
  const parts = signals.map((s, i) => {
    if (s === null) return 'null';
    const { data, ...rest } = s as Record<string, unknown>;
    const head = JSON.stringify(rest);
    if (data === undefined || data === null) return head;
    const text = dataTexts[i] ?? JSON.stringify(data);
    return `${head.slice(0, -1)},"data":${text}}`;
  });
  return Buffer.from(`{"signals":[${parts.join(',')}]}`);
}
