/**
 * A reader for the plain YAML subset docker-compose.yml is kept in (no YAML package is a
 * dependency of this project): block mappings, block lists of scalars, flow lists written
 * as JSON (`["a", "b"]`), scalars plain, "double-quoted" (JSON) or 'single-quoted', and
 * comments. Plain scalars stay strings. Anything else — anchors, tags, multi-line strings,
 * flow mappings, mappings inside list items, tabs, duplicate keys — is an error naming the
 * line, so the file cannot drift out of what this reader understands without a failing test.
 */
export type YamlValue = string | null | YamlValue[] | { [key: string]: YamlValue };

interface Line {
  no: number;
  indent: number;
  text: string;
}

/** The text without its comment: a `#` at the start or after a blank, outside quotes. */
function stripComment(s: string): string {
  let quote: string | null = null;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (quote) {
      if (c === '\\' && quote === '"') i++;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === "'") quote = c;
    else if (c === '#' && (i === 0 || s[i - 1] === ' ')) return s.slice(0, i).trimEnd();
  }
  return s.trimEnd();
}

export function parseYamlSubset(source: string): YamlValue {
  const lines: Line[] = [];
  for (const [i, raw] of source.split('\n').entries()) {
    if (raw.includes('\t')) throw new Error(`line ${i + 1}: tab character`);
    const text = stripComment(raw);
    if (text.trim() === '') continue;
    if (text.trim() === '---' && lines.length === 0) continue;
    lines.push({ no: i + 1, indent: text.length - text.trimStart().length, text: text.trim() });
  }
  let pos = 0;

  const scalar = (s: string, no: number): YamlValue => {
    if (s === '') return null;
    if (/^[&*!|>{]/.test(s)) throw new Error(`line ${no}: ${JSON.stringify(s[0])} is outside the subset`);
    if (s.startsWith('[') || s.startsWith('"')) {
      try {
        const v = JSON.parse(s) as unknown;
        if (Array.isArray(v) && !v.every((x) => typeof x === 'string')) throw new Error('a flow list of strings only');
        return v as YamlValue;
      } catch (err) {
        throw new Error(`line ${no}: ${s.slice(0, 30)}…: not JSON (${(err as Error).message})`);
      }
    }
    if (s.startsWith("'")) {
      if (!/^'(?:[^']|'')*'$/.test(s)) throw new Error(`line ${no}: unterminated single-quoted string`);
      return s.slice(1, -1).replace(/''/g, "'");
    }
    if (/: |:$/.test(s)) throw new Error(`line ${no}: a mapping where a scalar was expected: ${s}`);
    return s;
  };

  const block = (indent: number): YamlValue => {
    const first = lines[pos]!;
    if (first.text.startsWith('- ') || first.text === '-') {
      const list: YamlValue[] = [];
      while (pos < lines.length && lines[pos]!.indent === indent && (lines[pos]!.text.startsWith('- ') || lines[pos]!.text === '-')) {
        const l = lines[pos++]!;
        const item = l.text.slice(1).trim();
        if (item === '') throw new Error(`line ${l.no}: nested blocks in list items are outside the subset`);
        list.push(scalar(item, l.no));
      }
      return list;
    }
    const map: { [key: string]: YamlValue } = {};
    while (pos < lines.length && lines[pos]!.indent === indent) {
      const l = lines[pos++]!;
      const m = /^("(?:[^"\\]|\\.)*"|[A-Za-z0-9_.\-/]+):(?: (.*))?$/.exec(l.text);
      if (!m) throw new Error(`line ${l.no}: expected "key: value" or "key:", got ${JSON.stringify(l.text)}`);
      const key = m[1]!.startsWith('"') ? (JSON.parse(m[1]!) as string) : m[1]!;
      if (Object.hasOwn(map, key)) throw new Error(`line ${l.no}: duplicate key ${key}`);
      const rest = (m[2] ?? '').trim();
      if (rest !== '') map[key] = scalar(rest, l.no);
      else if (pos < lines.length && lines[pos]!.indent > indent) map[key] = block(lines[pos]!.indent);
      else map[key] = null;
    }
    if (pos < lines.length && lines[pos]!.indent > indent) throw new Error(`line ${lines[pos]!.no}: unexpected indentation`);
    return map;
  };

  if (lines.length === 0) return null;
  if (lines[0]!.indent !== 0) throw new Error(`line ${lines[0]!.no}: the document must start at column 1`);
  const doc = block(0);
  if (pos < lines.length) throw new Error(`line ${lines[pos]!.no}: unexpected indentation`);
  return doc;
}
