/**
 * Request-body buffers handed back for reuse. Every large body used to get a fresh ArrayBuffer
 * (132 KB per 500-signal batch), and V8 counts ArrayBuffer memory towards its collection
 * heuristics: under bench/ingest.ts the ingress ran a full mark-compact every ~65 requests,
 * 9–11% of its CPU (a gc PerformanceObserver in the service: 155 major + 155 incremental
 * collections in 12 s). Reusing the buffers of bodies whose requests are finished removes
 * that allocation (the NATS client's copy of each publish remains).
 *
 * A buffer comes back only through `release`, which the wrapper (src/http/wrap.ts) calls when
 * the handler says, through `Request.recycleBody`, that nothing refers to the body any more.
 * Only buffers lent by this pool are taken back, each once (`lent`): a stray or second
 * release is ignored, so a mistake costs an allocation, never a buffer shared by two requests.
 */

/** Bodies below this size use ordinary allocations (Node's own slab serves the small ones). */
export const POOL_MIN_BYTES = 16 * 1024;

export interface BodyPoolOptions {
  /** Free buffers kept per size class. */
  perClass?: number;
  /** Bytes of free buffers kept in all. */
  maxFreeBytes?: number;
}

export class BodyPool {
  /** Free buffers by capacity (a power of two). */
  private readonly free = new Map<number, Buffer[]>();
  /** Backing ArrayBuffers lent out and not yet released (weak: a body never released, say of a refused request, is collected as before). */
  private readonly lent = new WeakSet<ArrayBufferLike>();
  private freeBytes = 0;
  private readonly perClass: number;
  private readonly maxFreeBytes: number;

  constructor(opts: BodyPoolOptions = {}) {
    this.perClass = opts.perClass ?? 32;
    this.maxFreeBytes = opts.maxFreeBytes ?? 32 * 1024 * 1024;
  }

  /** A buffer of exactly `size` bytes (contents undefined), or null when `size` is below POOL_MIN_BYTES. */
  acquire(size: number): Buffer | null {
    if (size < POOL_MIN_BYTES) return null;
    const capacity = 2 ** Math.ceil(Math.log2(size));
    const list = this.free.get(capacity);
    let whole = list?.pop();
    if (whole) this.freeBytes -= capacity;
    else whole = Buffer.allocUnsafeSlow(capacity); // its own ArrayBuffer, never Node's shared slab
    this.lent.add(whole.buffer);
    return whole.subarray(0, size);
  }

  /** Takes back a buffer `acquire` returned; anything else, or a second release, is ignored. */
  release(buf: Buffer): void {
    const ab = buf.buffer;
    if (!this.lent.delete(ab)) return;
    const capacity = ab.byteLength;
    if (this.freeBytes + capacity > this.maxFreeBytes) return;
    let list = this.free.get(capacity);
    if (!list) this.free.set(capacity, (list = []));
    if (list.length >= this.perClass) return;
    list.push(Buffer.from(ab, 0, capacity));
    this.freeBytes += capacity;
  }

  /** Bytes of free buffers held (tests). */
  get freeByteCount(): number {
    return this.freeBytes;
  }
}

/** The process's pool, used by the body reader of src/http/wrap.ts. */
export const bodyPool = new BodyPool();
