/**
 * Compressed request bodies (`Content-Encoding`), for every route that reads a body; used only
 * by the body reader of src/http/wrap.ts, before any handler (so authentication, validation
 * and the rate limit see the decompressed body, in their usual order).
 *
 * Codings: `identity` (or no header), `gzip` (and its alias `x-gzip`), `deflate` (RFC 9110:
 * zlib format; raw DEFLATE, which some clients send under that name, is recognised by its
 * first two bytes), and `zstd` when the runtime's node:zlib has it (Node ≥ 22.15 / 23.8; not
 * Node 20) — detected once at load. Anything else, or more than one coding stacked, is refused
 * with 415 UNSUPPORTED_CONTENT_ENCODING naming it (and an `Accept-Encoding` header listing
 * what is accepted, RFC 7694), so a client can fall back to an uncompressed body.
 *
 * The body limit applies twice: to the bytes received (by the reader) and to the bytes the
 * decompressor produces. The decompressor is a stream fed the compressed body; its output is
 * counted chunk by chunk and the stream is destroyed as soon as the count passes the limit,
 * so a bomb (10 MB of zeros is ~10 KB of gzip) costs at most the limit plus one output chunk
 * (DECODE_CHUNK_BYTES) of memory and work, and answers 413 PAYLOAD_TOO_LARGE. Corrupt data
 * answers 400 INVALID_CONTENT_ENCODING with zlib's reason. Neither reaches a handler, so
 * nothing is ingested or changed.
 *
 * The inflating runs on the libuv thread pool (the zlib stream API); the event loop only sets
 * the stream up and takes one callback per output chunk, so however large the limit
 * (MAX_BODY_BYTES goes up to 64 MiB) no request holds it for long. Measured with
 * bench/decompress.ts (2 cores shared with other work, load average 13; Node 20): a typical
 * 500-signal batch (132,009 bytes of JSON, 11,032 gzipped at level 6: 12×) inflates in
 * 0.16–0.21 ms of CPU. 64 decoded at once kept the event loop busy 7–12 ms in all, about what
 * gunzipSync of the same 64 costs (for a body this small the stream's set-up on the main
 * thread costs about as much as the inflating saved), but in slices: worst single delay
 * 2.5–5.7 ms, against 7–9 ms in one block with gunzipSync. A 10 MB-of-zeros bomb (9.7 KB of
 * gzip) against the 1 MB limit stopped after producing 1,048,576 bytes (16 chunks).
 */
import zlib from 'node:zlib';
import type { Transform } from 'node:stream';
import { ApiError } from '../errors.js';

export type Coding = 'identity' | 'gzip' | 'deflate' | 'zstd';

/** Output chunk of the decompressors: the most a bomb can make us produce past the limit. */
export const DECODE_CHUNK_BYTES = 64 * 1024;

type ZstdZlib = { createZstdDecompress?: (opts?: zlib.ZlibOptions) => Transform; zstdDecompress?: unknown };
const z = zlib as unknown as ZstdZlib;

/** Whether this runtime's node:zlib decodes zstd (Node 20 does not). */
export const ZSTD_AVAILABLE = typeof z.zstdDecompress === 'function' && typeof z.createZstdDecompress === 'function';

/** The codings accepted, in the order of the `Accept-Encoding` header of a 415. */
export const SUPPORTED_CODINGS: readonly Coding[] = ZSTD_AVAILABLE ? ['gzip', 'deflate', 'zstd', 'identity'] : ['gzip', 'deflate', 'identity'];

const ALIASES: Record<string, Coding> = { identity: 'identity', gzip: 'gzip', 'x-gzip': 'gzip', deflate: 'deflate', ...(ZSTD_AVAILABLE ? { zstd: 'zstd' as const } : {}) };

const unsupported = (details: string): ApiError =>
  new ApiError('UNSUPPORTED_CONTENT_ENCODING', `${details}; accepted: ${SUPPORTED_CODINGS.join(', ')}`, { 'Accept-Encoding': SUPPORTED_CODINGS.join(', ') });

/**
 * The coding of a `Content-Encoding` header value (case-insensitive; `identity` entries of a
 * list are ignored), or the 415 to answer.
 */
export function parseContentEncoding(header: string): Coding | ApiError {
  const names = header
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '' && s !== 'identity');
  if (names.length === 0) return 'identity';
  const shown = (s: string): string => JSON.stringify(s.length > 40 ? `${s.slice(0, 40)}…` : s);
  if (names.length > 1) return unsupported(`Content-Encoding ${shown(header.trim())}: stacked codings are not supported, send one`);
  const coding = ALIASES[names[0]!];
  if (!coding) {
    const why = names[0] === 'zstd' ? ' (this server runs on a Node.js without zstd in node:zlib)' : '';
    return unsupported(`Content-Encoding ${shown(names[0]!)} is not supported${why}`);
  }
  return coding;
}

/** Counts what a decompression produced (tests read it: the work stops early on a bomb). */
export interface DecodeProbe {
  /** Bytes of output produced by the decompressor, including any made after it was stopped. */
  produced: number;
}

/** A zlib header (RFC 1950): CM 8, a window of at most 32 KiB, and a check of the first two bytes. */
const isZlibHeader = (b: Buffer): boolean => b.length >= 2 && (b[0]! & 0x0f) === 8 && b[0]! >> 4 <= 7 && ((b[0]! << 8) | b[1]!) % 31 === 0;

function decompressor(coding: Exclude<Coding, 'identity'>, input: Buffer): Transform {
  const opts = { chunkSize: DECODE_CHUNK_BYTES };
  switch (coding) {
    case 'gzip':
      return zlib.createGunzip(opts);
    case 'deflate':
      return isZlibHeader(input) ? zlib.createInflate(opts) : zlib.createInflateRaw(opts);
    case 'zstd':
      return z.createZstdDecompress!(opts);
  }
}

/**
 * The decoded body: `input` itself for identity (and for an empty body, which has nothing to
 * decode), otherwise its decompression, refused with 413 as soon as it passes `max` bytes and
 * with 400 when the data is not valid `coding`.
 */
export function decodeBody(input: Buffer, coding: Coding, max: number, probe: DecodeProbe = { produced: 0 }): Promise<Buffer> {
  if (coding === 'identity' || input.length === 0) return Promise.resolve(input);
  return new Promise((resolve, reject) => {
    const stream = decompressor(coding, input);
    const chunks: Buffer[] = [];
    let total = 0;
    let settled = false;
    const fail = (err: ApiError): void => {
      if (settled) return;
      settled = true;
      chunks.length = 0;
      stream.destroy();
      reject(err);
    };
    stream.on('data', (chunk: Buffer) => {
      probe.produced += chunk.length;
      if (settled) return;
      total += chunk.length;
      if (total > max) {
        fail(new ApiError('PAYLOAD_TOO_LARGE', `request body larger than the limit of ${max} bytes once decompressed (Content-Encoding: ${coding})`));
        return;
      }
      chunks.push(chunk);
    });
    stream.on('error', (err: Error) => fail(new ApiError('INVALID_CONTENT_ENCODING', `the body is not valid ${coding} data (Content-Encoding: ${coding}): ${err.message}`)));
    stream.on('end', () => {
      if (settled) return;
      settled = true;
      resolve(Buffer.concat(chunks, total));
    });
    stream.end(input);
  });
}
