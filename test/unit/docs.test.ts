/**
 * The documentation, checked rather than trusted: every relative link and anchor in a tracked
 * Markdown file resolves, the README stays within its length budget, and no tracked text
 * speaks of issue numbers or work sessions (the project's history lives in git and in the
 * bench history data, not in its prose).
 */
import t from 'tap';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** What .gitignore keeps out of the project (its directories and the files of these forms), for a copy without git. */
const IGNORED_DIRS = new Set(['.git', 'node_modules', 'dist', '.data', '.tap', '.tools']);
const IGNORED_FILE = /(\.log|\.tmp|^\.env)$/;

/** The project's files: git's list in a checkout; in a copy of its files without git (scripts/test-lts.sh's), every file but the ignored ones. */
function projectFiles(): string[] {
  try {
    return execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\0').filter((f) => f !== '' && existsSync(path.join(ROOT, f)));
  } catch {
    const out: string[] = [];
    const walk = (dir: string): void => {
      for (const e of readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
        const rel = dir === '' ? e.name : `${dir}/${e.name}`;
        if (e.isDirectory()) {
          if (!IGNORED_DIRS.has(e.name) && !e.name.startsWith('.tap-readme-')) walk(rel);
        } else if (e.isFile() && !IGNORED_FILE.test(e.name)) out.push(rel);
      }
    };
    walk('');
    return out;
  }
}
const tracked = projectFiles();
const markdown = tracked.filter((f) => f.endsWith('.md'));

/** GitHub's anchor of a heading: lower case, formatting and punctuation dropped, spaces as dashes. */
const slug = (heading: string): string =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[`*_]/g, '')
    .replace(/[^\p{L}\p{N}\- ]/gu, '')
    .replace(/ /g, '-');

/** Text outside fenced code blocks. */
const prose = (text: string): string => text.replace(/^```[\s\S]*?^```/gm, '');

const anchorCache = new Map<string, Set<string>>();
function anchorsOf(file: string): Set<string> {
  let out = anchorCache.get(file);
  if (out) return out;
  out = new Set();
  const seen = new Map<string, number>();
  for (const line of prose(readFileSync(file, 'utf8')).split('\n')) {
    const m = /^(#+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const s = slug(m[2]!);
    const n = seen.get(s) ?? 0;
    seen.set(s, n + 1);
    out.add(n === 0 ? s : `${s}-${n}`);
  }
  anchorCache.set(file, out);
  return out;
}

t.test('every relative link and anchor in the Markdown files resolves', async (t) => {
  const broken: string[] = [];
  for (const f of markdown) {
    const file = path.join(ROOT, f);
    for (const m of prose(readFileSync(file, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [p, anchor] = target.split('#', 2) as [string, string | undefined];
      const resolved = p === '' ? file : path.resolve(path.dirname(file), decodeURI(p));
      if (!existsSync(resolved)) {
        broken.push(`${f}: ${target} (no such file)`);
        continue;
      }
      if (anchor === undefined || anchor === '') continue;
      if (statSync(resolved).isDirectory() || !resolved.endsWith('.md')) broken.push(`${f}: ${target} (an anchor on a file that is not Markdown)`);
      else if (!anchorsOf(resolved).has(anchor)) broken.push(`${f}: ${target} (no such heading)`);
    }
  }
  t.ok(markdown.length > 10, `${markdown.length} Markdown files read`);
  t.same(broken, [], 'no broken link');
});

t.test('the README stays short', async (t) => {
  const lines = readFileSync(path.join(ROOT, 'README.md'), 'utf8').split('\n').length;
  t.ok(lines <= 250, `README.md has ${lines} lines (budget 250): details belong in docs/`);
});

t.test('no tracked text speaks of issue numbers or work sessions', async (t) => {
  // Data, not prose: the bench history records runs as they were.
  const data = new Set(['bench/results/history.jsonl', 'bench/results/history.html', 'package-lock.json']);
  // Built from parts, so that this file does not name what it looks for.
  const phrase = new RegExp(`\\b(${['iss', 'ue'].join('')}|${['sess', 'ion'].join('')}) #?[0-9]+\\b`, 'i');
  const found: string[] = [];
  for (const f of tracked) {
    if (data.has(f) || /\.(png|jpg|ico|gz|woff2?)$/.test(f)) continue;
    const lines = readFileSync(path.join(ROOT, f), 'utf8').split('\n');
    lines.forEach((line, i) => {
      if (phrase.test(line)) found.push(`${f}:${i + 1}: ${line.trim().slice(0, 120)}`);
    });
  }
  t.same(found, [], 'history lives in git and in the bench history, not in the prose');
});
