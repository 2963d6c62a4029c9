// Copies non-TypeScript assets (Lua scripts) next to the compiled JavaScript.
import { cpSync } from 'node:fs';
cpSync('src/ratelimit/lua', 'dist/src/ratelimit/lua', { recursive: true });
