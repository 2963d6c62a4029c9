/**
 * The analytics language's tokenizer. It knows ClickHouse's lexical rules only as far as the
 * language needs them (see grammar.ts): ASCII identifiers, back-quoted and double-quoted
 * identifiers, single-quoted strings with ClickHouse escapes, numbers, operators, `--` and
 * nested `/* *\/` comments, ASCII whitespace. Anything else is a CompileError at its position.
 */
import { CompileError } from './errors.js';

export type TokenKind = 'ident' | 'qident' | 'string' | 'int' | 'float' | 'op' | 'eof';

export interface Token {
  kind: TokenKind;
  /** ident: the text as written; qident/string: the decoded value; numbers: the source digits; op: the operator. */
  text: string;
  /** Offset of the token's first character in the query. */
  at: number;
  /** Offset just after the token's last character. */
  end: number;
  /** Whitespace or a comment came right before this token. */
  spaced: boolean;
}

const OPS = ['->', '::', '||', '<=', '>=', '!=', '<>', '==', '=', '<', '>', '+', '-', '*', '/', '%', '(', ')', '[', ']', ',', '.', '?', ':', ';'];
const IDENT_START = /[A-Za-z_]/;
const IDENT_PART = /[A-Za-z0-9_]/;
const DIGIT = /[0-9]/;
/** ClickHouse's escapes (checked against the engine: unknown ones keep their backslash, \N is nothing). */
const SIMPLE_ESCAPES: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', '0': '\0', a: '\x07', v: '\v', e: '\x1b', N: '', '\\': '\\', "'": "'", '"': '"', '`': '`', '/': '/', '=': '=' };

export function tokenize(src: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  let spaced = false;
  const n = src.length;
  while (i < n) {
    const c = src[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v') {
      i++;
      spaced = true;
      continue;
    }
    if (c === '-' && src[i + 1] === '-') {
      while (i < n && src[i] !== '\n') i++;
      spaced = true;
      continue;
    }
    if (c === '/' && src[i + 1] === '*') {
      const start = i;
      let depth = 0;
      while (i < n) {
        if (src[i] === '/' && src[i + 1] === '*') {
          depth++;
          i += 2;
        } else if (src[i] === '*' && src[i + 1] === '/') {
          depth--;
          i += 2;
          if (depth === 0) break;
        } else i++;
      }
      if (depth !== 0) throw new CompileError('INVALID_QUERY', 'unterminated /* comment', src, start);
      spaced = true;
      continue;
    }
    const at = i;
    if (IDENT_START.test(c)) {
      while (i < n && IDENT_PART.test(src[i]!)) i++;
      out.push({ kind: 'ident', text: src.slice(at, i), at, end: i, spaced });
    } else if (DIGIT.test(c) || (c === '.' && DIGIT.test(src[i + 1] ?? '') && !afterValue(out, spaced))) {
      i = readNumber(src, i, out, spaced);
    } else if (c === "'") {
      const [value, end] = readQuoted(src, i, "'");
      out.push({ kind: 'string', text: value, at, end, spaced });
      i = end;
    } else if (c === '`' || c === '"') {
      const [value, end] = readQuoted(src, i, c);
      if (value === '') throw new CompileError('INVALID_QUERY', 'empty quoted identifier', src, at);
      if (/[\x00-\x1f\x7f\u2028\u2029]/.test(value)) throw new CompileError('INVALID_QUERY', 'a quoted name may not contain line breaks or control characters', src, at);
      out.push({ kind: 'qident', text: value, at, end, spaced });
      i = end;
    } else if (c === '{') {
      throw new CompileError('INVALID_QUERY', 'query parameters ({name:Type}) are not supported; write the values in the query', src, at);
    } else {
      const op = OPS.find((o) => src.startsWith(o, i));
      if (!op) {
        const cp = src.codePointAt(i)!;
        const shown = cp >= 0x20 && cp < 0x7f ? `"${c}"` : `U+${cp.toString(16).toUpperCase().padStart(4, '0')}`;
        throw new CompileError('INVALID_QUERY', `unexpected character ${shown} (identifiers are ASCII unless quoted; whitespace is ASCII)`, src, at);
      }
      i += op.length;
      out.push({ kind: 'op', text: op, at, end: i, spaced });
    }
    spaced = false;
  }
  out.push({ kind: 'eof', text: '', at: n, end: n, spaced });
  return out;
}

/** `t.1` is tuple access, not the number `.1`: a dot right after a value is an operator. */
function afterValue(out: Token[], spaced: boolean): boolean {
  const last = out[out.length - 1];
  if (!last || spaced) return false;
  return last.kind === 'ident' || last.kind === 'qident' || (last.kind === 'op' && (last.text === ')' || last.text === ']')) || last.kind === 'int';
}

function readNumber(src: string, i: number, out: Token[], spaced: boolean): number {
  const at = i;
  if (src[i] === '0' && (src[i + 1] === 'x' || src[i + 1] === 'X') && /[0-9a-fA-F]/.test(src[i + 2] ?? '')) {
    i += 2;
    while (/[0-9a-fA-F]/.test(src[i] ?? '')) i++;
    out.push({ kind: 'int', text: BigInt(src.slice(at, i)).toString(), at, end: i, spaced });
  } else {
    let float = false;
    while (DIGIT.test(src[i] ?? '')) i++;
    // `t.1.2` (nested tuple access) must not read `1.2` as a number.
    const prev = out[out.length - 1];
    const tupleIndex = prev?.kind === 'op' && prev.text === '.' && !spaced;
    if (!tupleIndex && src[i] === '.' && !(src[i + 1] === '.')) {
      float = true;
      i++;
      while (DIGIT.test(src[i] ?? '')) i++;
    }
    if (!tupleIndex && (src[i] === 'e' || src[i] === 'E') && /[0-9]/.test((src[i + 1] === '+' || src[i + 1] === '-' ? src[i + 2] : src[i + 1]) ?? '')) {
      float = true;
      i += src[i + 1] === '+' || src[i + 1] === '-' ? 2 : 1;
      while (DIGIT.test(src[i] ?? '')) i++;
    }
    out.push({ kind: float ? 'float' : 'int', text: src.slice(at, i), at, end: i, spaced });
  }
  if (IDENT_PART.test(src[i] ?? '')) throw new CompileError('INVALID_QUERY', `malformed number "${src.slice(at, i + 1)}"`, src, at);
  return i;
}

/** Reads a quoted string or identifier starting at the opening quote; returns the decoded value and the end offset. */
function readQuoted(src: string, start: number, q: string): [string, number] {
  let i = start + 1;
  let value = '';
  for (;;) {
    if (i >= src.length) throw new CompileError('INVALID_QUERY', `unterminated ${q === "'" ? 'string' : 'quoted identifier'}`, src, start);
    const c = src[i]!;
    if (c === q) {
      if (src[i + 1] === q) {
        value += q;
        i += 2;
        continue;
      }
      return [value, i + 1];
    }
    if (c === '\\') {
      const e = src[i + 1];
      if (e === undefined) throw new CompileError('INVALID_QUERY', 'unterminated escape sequence', src, i);
      if (e === 'x') {
        const hex = src.slice(i + 2, i + 4);
        if (!/^[0-9a-fA-F]{2}$/.test(hex)) throw new CompileError('INVALID_QUERY', 'a \\x escape needs two hexadecimal digits', src, i);
        const code = parseInt(hex, 16);
        if (code >= 0x80) throw new CompileError('INVALID_QUERY', '\\x escapes above \\x7F are not supported; write the character itself', src, i);
        value += String.fromCharCode(code);
        i += 4;
        continue;
      }
      const simple = SIMPLE_ESCAPES[e];
      if (simple !== undefined) value += simple;
      // ClickHouse keeps the backslash of an unknown escape (so LIKE patterns can write \% and \_).
      else value += `\\${e}`;
      i += 2;
      continue;
    }
    value += c;
    i++;
  }
}
