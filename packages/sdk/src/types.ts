/**
 * ClickHouse type names, as the analytics API returns them in `columns[].type`, parsed into a
 * small tree, and the conversion of one JSON value of such a type into an exact JS value:
 * 64-bit and wider integers become BigInt, decimals an exact string (or whatever the caller's
 * `decimal` function makes of that string), recursively through Nullable, LowCardinality,
 * Array, Map and Tuple. Everything else is left as the API sent it.
 */
export interface TypeNode {
  name: string;
  /** Type arguments; `undefined` for a plain name. Literal arguments (numbers, 'strings', enum items) are kept as text. */
  args?: TypeArg[];
}

export type TypeArg = { type: TypeNode; field?: string } | { literal: string };

const WIDE_INT = /^U?Int(64|128|256)$/;
const DECIMAL = /^Decimal(32|64|128|256)?$/;

/** Splits `s` at top-level commas, respecting quotes ('…', `…`, "…") and parentheses. */
function splitTop(s: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let quote = '';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (quote) {
      if (c === '\\') i++;
      else if (c === quote) quote = '';
    } else if (c === "'" || c === '`' || c === '"') quote = c;
    else if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(s.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(s.slice(start));
  return parts.map((p) => p.trim());
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TYPE_START = /^[A-Za-z_][A-Za-z0-9_]*\s*(\(|$)/;

/** Parses a ClickHouse type name such as `Nullable(Decimal(76, 24))` or `Tuple(a Int64, b String)`. */
export function parseType(text: string): TypeNode {
  const s = text.trim();
  const open = s.indexOf('(');
  if (open === -1 || !s.endsWith(')')) return { name: s };
  const name = s.slice(0, open).trim();
  if (!IDENT.test(name)) return { name: s };
  const args = splitTop(s.slice(open + 1, -1)).map(parseArg);
  return { name, args };
}

function parseArg(a: string): TypeArg {
  if (a === '' || /^[-+\d'"]/.test(a) || a.includes('=')) return { literal: a };
  // A named tuple element: `name Type` (the name may be quoted with backticks or double quotes).
  const named = /^(`(?:[^`\\]|\\.)*`|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*)\s+(\S[\s\S]*)$/.exec(a);
  if (named && TYPE_START.test(named[2]!)) return { field: unquote(named[1]!), type: parseType(named[2]!) };
  if (TYPE_START.test(a)) return { type: parseType(a) };
  return { literal: a };
}

const unquote = (n: string): string => (n.startsWith('`') || n.startsWith('"') ? n.slice(1, -1).replace(/\\(.)/g, '$1') : n);

const typeArgs = (t: TypeNode): TypeNode[] => (t.args ?? []).flatMap((a) => ('type' in a ? [a.type] : []));

/** How a decimal is returned: the exact string by default, or the caller's own (e.g. `(s) => new Decimal(s)` with decimal.js). */
export type DecimalFactory<D> = (exact: string) => D;

/** True when values of `t` need converting (so a column of plain types is passed through untouched). */
export function needsConversion(t: TypeNode): boolean {
  if (WIDE_INT.test(t.name) || DECIMAL.test(t.name)) return true;
  return typeArgs(t).some(needsConversion);
}

/** Converts one JSON value of ClickHouse type `t`. */
export function convertValue<D>(value: unknown, t: TypeNode, decimal: DecimalFactory<D>): unknown {
  if (value === null || value === undefined) return value;
  if (WIDE_INT.test(t.name)) return toBigInt(value);
  if (DECIMAL.test(t.name)) return decimal(toDecimalString(value));
  const inner = typeArgs(t);
  switch (t.name) {
    case 'Nullable':
    case 'LowCardinality':
    case 'SimpleAggregateFunction':
      return inner.length ? convertValue(value, inner[inner.length - 1]!, decimal) : value;
    case 'Array':
      return Array.isArray(value) && inner[0] ? value.map((v) => convertValue(v, inner[0]!, decimal)) : value;
    case 'Tuple':
      if (Array.isArray(value)) return value.map((v, i) => (inner[i] ? convertValue(v, inner[i]!, decimal) : v));
      if (typeof value === 'object') {
        // A named tuple printed as an object.
        const fields = (t.args ?? []).flatMap((a) => ('type' in a && a.field !== undefined ? [[a.field, a.type] as const] : []));
        const out: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
          const ft = fields.find(([f]) => f === k)?.[1];
          out[k] = ft ? convertValue(v, ft, decimal) : v;
        }
        return out;
      }
      return value;
    case 'Map': {
      const vt = inner[1];
      if (!vt || typeof value !== 'object' || Array.isArray(value)) return value;
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = convertValue(v, vt, decimal);
      return out;
    }
    default:
      return value;
  }
}

function toBigInt(v: unknown): bigint | unknown {
  if (typeof v === 'bigint') return v;
  if (typeof v === 'string' && /^[-+]?\d+$/.test(v.trim())) return BigInt(v.trim());
  // A number can only be exact when it is a safe integer; anything else is left as sent.
  if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt(v);
  return v;
}

function toDecimalString(v: unknown): string {
  if (typeof v === 'string') return v;
  // The API quotes decimals; a bare number would already have lost digits in JSON.parse.
  return String(v);
}
