/**
 * Newline-terminated lines as bytes (the rows worker's packed output, workers/rows.ts): every
 * line ends in '\n' and holds no other '\n' (JSON text escapes newlines).
 */
const NL = 0x0a;

/** The lines whose `keep` entry is true, in order; the input itself when all are kept. */
export function keptLines(bytes: Uint8Array, keep: readonly boolean[]): Uint8Array {
  if (keep.every(Boolean)) return bytes;
  const parts: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i < keep.length && start < bytes.length; i++) {
    const nl = bytes.indexOf(NL, start);
    const end = nl === -1 ? bytes.length : nl + 1;
    if (keep[i]) parts.push(bytes.subarray(start, end));
    start = end;
  }
  return Buffer.concat(parts);
}


/** The entries of `of` whose `keep` entry is true, in order (the references of `keptLines`'s lines); `of` itself when all are kept. */
export function keptRefs(of: Uint16Array, keep: readonly boolean[]): Uint16Array {
  if (keep.every(Boolean)) return of;
  const out = new Uint16Array(of.length);
  let n = 0;
  for (let i = 0; i < of.length; i++) if (keep[i]) out[n++] = of[i]!;
  return out.subarray(0, n);
}

/**
 * The lines whose `keep` entry is true, in order, each JSON object line starting with
 * `prefixOf(i)` in place of its `{` (the prefix opens the object: src/pipeline/identities.ts).
 */
export function prefixedLines(bytes: Uint8Array, keep: readonly boolean[], prefixOf: (i: number) => Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  let start = 0;
  for (let i = 0; i < keep.length && start < bytes.length; i++) {
    const nl = bytes.indexOf(NL, start);
    const end = nl === -1 ? bytes.length : nl + 1;
    if (keep[i]) parts.push(prefixOf(i), bytes.subarray(start + 1, end));
    start = end;
  }
  return Buffer.concat(parts);
}
