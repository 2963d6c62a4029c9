/** A process's threads as /proc shows them: each thread's name and nice value. */
import { readFileSync, readdirSync } from 'node:fs';

/** The fields of a /proc stat line after the name (field 3 first; the name in parentheses may hold spaces). */
const fieldsOf = (stat: string): string[] => stat.slice(stat.lastIndexOf(')') + 2).split(' ');

/** The threads of process `pid` (none once it is gone): id, name and nice value (field 19). */
export function threadsOf(pid: number): { tid: number; name: string; nice: number }[] {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  return tids.flatMap((d) => {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${d}/stat`, 'utf8');
      return [{ tid: Number(d), name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), nice: Number(fieldsOf(stat)[16]) }];
    } catch {
      return []; // the thread ended meanwhile
    }
  });
}

/** The child of process `parent` whose name starts with `name` (field 4 of its stat is its parent), or null. */
export function childNamed(parent: number, name: string): number | null {
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      if (stat.includes(`(${name}`) && Number(fieldsOf(stat)[1]) === parent) return Number(d);
    } catch {
      // a process that ended meanwhile
    }
  }
  return null;
}
