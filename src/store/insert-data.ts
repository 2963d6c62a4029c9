/**
 * The one rule every insert body given to the embedded engine must keep: no empty line. chdb's
 * raw insert runs what follows an empty line ("\n\n") of the data as further SQL statements on
 * the same session (found by an attack on the engine host: `["x"]\n\nDROP TABLE t` inserted the
 * row and dropped the table). JSONEachRow and JSONCompactEachRow text never holds one (JSON text
 * has no raw newline; rows end in '\n'), so a body with one is refused, whole, before the
 * engine sees it: with ClickHouse's INCORRECT_DATA, a data error (the pipeline dead-letters
 * such a batch rather than retry it).
 */
const NL = 0x0a;

export function emptyLineAt(data: Uint8Array): number {
  if (data.length > 0 && data[0] === NL) return 0;
  const at = Buffer.from(data.buffer, data.byteOffset, data.byteLength).indexOf('\n\n');
  return at < 0 ? -1 : at + 1;
}

/** The message of a refused body (ClickHouse's form: "Code: 117. DB::Exception: … (INCORRECT_DATA)"). */
export function emptyLineError(at: number): string {
  return `Code: 117. DB::Exception: insert data holds an empty line at byte ${at}; rows are one JSON value per line, so nothing was inserted (INCORRECT_DATA)`;
}

/** Throws (an Error with ClickHouse's message form) when `data` holds an empty line. */
export function checkInsertData(data: Uint8Array): void {
  const at = emptyLineAt(data);
  if (at >= 0) throw new Error(emptyLineError(at));
}
