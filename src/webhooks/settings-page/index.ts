/**
 * The web settings page for webhooks (spec 4.4 rule 3), served without
 * authentication at GET /settings with its script and style sheet; everything the page
 * does goes through the webhook API with the API key the user enters (kept in the
 * browser's sessionStorage only).
 *
 * The files next to this module (index.html, app.js, app.css) are plain static assets:
 * `npm run build` copies them to dist (scripts/copy-assets.mjs). They are read once, when
 * the routes are made. The page answers with a strict Content-Security-Policy (scripts and
 * styles from this origin only, no inline code, Trusted Types required for HTML sinks), and
 * is never framed, cached or sent as a referrer.
 */
import { readFileSync } from 'node:fs';
import type { Route } from '../../http/route.js';

export const SETTINGS_PATH = '/settings';

export const SETTINGS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join('; ');

const COMMON: Record<string, string> = {
  'Cache-Control': 'no-store',
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cross-Origin-Resource-Policy': 'same-origin',
};

const asset = (name: string): Buffer => readFileSync(new URL(`./${name}`, import.meta.url));

/** GET routes of the page, mounted at the root: the HTML, its script and its style sheet (no key needed). */
export function settingsPageRoutes(): Route[] {
  const files: [string, string, string][] = [
    [SETTINGS_PATH, 'index.html', 'text/html; charset=utf-8'],
    [`${SETTINGS_PATH}/app.js`, 'app.js', 'text/javascript; charset=utf-8'],
    [`${SETTINGS_PATH}/app.css`, 'app.css', 'text/css; charset=utf-8'],
  ];
  return files.map(([pattern, name, type]) => {
    const body = asset(name);
    const headers = { ...COMMON, 'Content-Type': type, 'Content-Security-Policy': SETTINGS_CSP, 'Cross-Origin-Opener-Policy': 'same-origin' };
    return { method: 'get', path: pattern, handler: () => ({ status: 200, body, headers }) } satisfies Route;
  });
}
