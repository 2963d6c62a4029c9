/**
 * What the analytics operations need from the store: a way to run one compiled SELECT with
 * per-query settings, answered as JSONCompact.
 */
export type QuerySettings = Record<string, string | number>;

export interface AnalyticsEngine {
  /**
   * Runs a statement printed by the query compiler (compiler/printer.ts), which carries the
   * organization scope in its view reads, with these settings (limits, read-only, output
   * format). Returns the JSONCompact output as bytes; throws engine errors as EngineError or
   * as the engine's own error (see engine-error.ts).
   *
   * `stop` aborts when the caller's deadline has passed: the engine must then stop the
   * statement's work (a server cancels the query; the embedded engine's host is killed) and
   * the call rejects.
   */
  select(sql: string, settings: QuerySettings, stop?: AbortSignal): Promise<Buffer>;
}

/** A SETTINGS clause for engines that take settings in the text (chdb). Values are quoted. */
export function settingsClause(settings: QuerySettings): string {
  const parts = Object.entries(settings).map(([k, v]) => {
    if (!/^[a-z_][a-z0-9_]*$/.test(k)) throw new Error(`bad setting name ${k}`);
    return `${k} = ${typeof v === 'number' ? String(v) : `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`}`;
  });
  return parts.length === 0 ? '' : ` SETTINGS ${parts.join(', ')}`;
}
