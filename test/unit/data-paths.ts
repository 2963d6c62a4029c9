/**
 * Test helper (not a test file): the reference for the `data` path rule, shared by
 * validate.test.ts and rows.test.ts.
 *
 * ClickHouse's JSON type reads dots in keys as path separators. Within one document (data, or
 * an object that is an element of an array, at any depth of arrays), every leaf (anything but
 * a plain object: numbers, strings, booleans, null, arrays) has the path of the keys leading
 * to it, joined by "."; two leaves with the same path make the engine refuse the insert.
 */
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The first path (in document order) that two leaves share, or null. */
export function firstDuplicatePath(data: Record<string, unknown>): string | null {
  const inValue = (v: unknown): string | null => {
    if (!Array.isArray(v)) return null;
    for (const x of v) {
      const d = isObj(x) ? inDoc(x) : inValue(x);
      if (d !== null) return d;
    }
    return null;
  };
  const inDoc = (doc: Record<string, unknown>): string | null => {
    const seen = new Set<string>();
    const visit = (o: Record<string, unknown>, keys: string[]): string | null => {
      for (const [k, v] of Object.entries(o)) {
        const path = [...keys, k];
        if (isObj(v)) {
          const d = visit(v, path);
          if (d !== null) return d;
          continue;
        }
        const joined = path.join('.');
        if (seen.has(joined)) return joined;
        seen.add(joined);
        const d = inValue(v);
        if (d !== null) return d;
      }
      return null;
    };
    return visit(doc, []);
  };
  return inDoc(data);
}

/**
 * Whether a document root (data, or an object in an array) has the key "" holding an object:
 * the shape of the remaining bug in src/ingress/validate.ts (the root prefix '' collides with
 * an empty key, so such data is checked with the wrong paths).
 */
export function rootEmptyKeyObject(data: Record<string, unknown>): boolean {
  const docs = (v: unknown, root: boolean): boolean => {
    if (Array.isArray(v)) return v.some((x) => docs(x, isObj(x)));
    if (!isObj(v)) return false;
    if (root && isObj(v[''])) return true;
    return Object.values(v).some((x) => docs(x, false));
  };
  return docs(data, true);
}
