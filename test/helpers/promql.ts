/**
 * The metric names a PromQL expression reads (enough of PromQL for a dashboard's queries):
 * label matchers, range selectors, strings and `by (…)`-style label lists are removed, then
 * every identifier not called as a function and not a keyword is a metric name.
 */
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'offset', 'bool', 'and', 'or', 'unless', 'inf', 'nan']);

export function metricNames(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const out = new Set<string>();
  for (const m of s.matchAll(/(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?/g)) {
    if (m[2] || KEYWORDS.has(m[1]!.toLowerCase())) continue;
    out.add(m[1]!);
  }
  return [...out];
}

export interface PanelQuery {
  panel: string;
  expr: string;
}

/** Every query of a Grafana dashboard (rows' nested panels included). */
export function dashboardQueries(dashboard: { panels?: unknown[] }): PanelQuery[] {
  const out: PanelQuery[] = [];
  const walk = (panels: unknown[]): void => {
    for (const p of panels as { title?: string; panels?: unknown[]; targets?: { expr?: string }[] }[]) {
      if (p.panels) walk(p.panels);
      for (const target of p.targets ?? []) if (target.expr) out.push({ panel: p.title ?? '', expr: target.expr });
    }
  };
  walk(dashboard.panels ?? []);
  return out;
}

/** Whether the Prometheus text has at least one sample of `name`. */
export const hasSeries = (text: string, name: string): boolean => new RegExp(`^${name}(?:\\{| )`, 'm').test(text);

/** The value of the sample `name{labels}` (labels exactly as exposed, in order), or undefined. */
export function sampleValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const m = /^([^{ ]+)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}
