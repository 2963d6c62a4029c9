// Copies non-TypeScript assets next to the compiled JavaScript: the Lua scripts, and the
// static files of the web settings page (src/webhooks/settings-page: HTML, JS, CSS).
import { cpSync } from 'node:fs';
cpSync('src/ratelimit/lua', 'dist/src/ratelimit/lua', { recursive: true });
cpSync('src/webhooks/settings-page', 'dist/src/webhooks/settings-page', { recursive: true, filter: (src) => !src.endsWith('.ts') });
