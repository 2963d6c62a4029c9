/**
 * One JSONCompact document from the documents chdb's streaming gives for a statement: chdb
 * formats each block of a streamed result as a whole document of its own (head with `meta`,
 * the block's rows, a tail with the block's row count and statistics), so the blocks' output
 * cannot simply be joined. The joined document is what the engine prints for the whole
 * result: the first block's head, every block's rows in the engine's layout (one row per line,
 * `\t\t[…]`, a comma after all but the last), and a tail with the total row count and the
 * statistics the host knows (`elapsed`, as the host measured the statement; the rows and bytes read are not
 * reported by chdb's streaming, so they are left out rather than given as 0).
 *
 * A block is taken apart where the layout says: its rows begin after DATA_OPEN and end at the
 * first DATA_CLOSE after it (a row is one line and its strings are escaped, so neither can
 * occur inside the rows). A block that is not laid out so, or whose tail carries totals or
 * extremes (which this document would drop), throws.
 *
 * Pure: no I/O. The pieces it returns are views of the blocks it was given (no copy of rows).
 */

const DATA_OPEN = Buffer.from('\n\t"data":\n\t[\n');
const DATA_CLOSE = Buffer.from('\n\t],\n');
const SEPARATOR = Buffer.from(',\n');
/** How far into a block the head may reach (column names and types; the service reads 1 MiB of it at most). */
const MAX_HEAD = 4 * 1024 * 1024;

export class CompactJoin {
  /** Rows given so far (the blocks' own counts). */
  rows = 0;
  private started = false;

  /** The joined document's next pieces for one block (`numRows`: the block's row count, as chdb gives it). */
  push(block: Buffer, numRows: number): Buffer[] {
    const open = block.subarray(0, MAX_HEAD + DATA_OPEN.length).indexOf(DATA_OPEN);
    if (open === -1) throw new Error('a streamed block of JSONCompact has no data section');
    const from = open + DATA_OPEN.length;
    // The rows end at the line break before DATA_CLOSE; no rows: DATA_CLOSE follows DATA_OPEN's own line break.
    const close = block.indexOf(DATA_CLOSE, from);
    if (close === -1) throw new Error('a streamed block of JSONCompact has no end of its data section');
    if (/"(totals|extremes)"/.test(block.toString('utf8', close))) throw new Error('a streamed JSONCompact result with totals or extremes is not joined');
    const out: Buffer[] = [];
    if (!this.started) {
      out.push(block.subarray(0, from));
      this.started = true;
    }
    if (close > from) {
      if (this.rows > 0) out.push(SEPARATOR);
      out.push(block.subarray(from, close));
    }
    this.rows += numRows;
    return out;
  }

  /** Whether a block was given (the head is out). */
  get begun(): boolean {
    return this.started;
  }

  /** The document's end, after the last block: the end of the rows, the row count and the statistics. */
  end(elapsedSeconds: number): Buffer {
    if (!this.started) throw new Error('a streamed JSONCompact result ended without a block');
    return Buffer.from(`\n\t],\n\n\t"rows": ${this.rows},\n\n\t"statistics":\n\t{\n\t\t"elapsed": ${elapsedSeconds.toFixed(9)}\n\t}\n}\n`);
  }
}
