/**
 * Lua scripts kept as files in ./lua, named `<command>-<numberOfKeys>.lua` (BullMQ's habit).
 * Each is registered once with SCRIPT LOAD and then called with EVALSHA; when Redis forgot
 * the script (a restart, SCRIPT FLUSH), the NOSCRIPT reply makes us load it again and retry.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';

const LUA_DIR = fileURLToPath(new URL('./lua/', import.meta.url));

export class LuaScript {
  private sha: string | null = null;
  readonly source: string;

  constructor(
    private readonly redis: Redis,
    readonly name: string,
    readonly numKeys: number,
  ) {
    this.source = readFileSync(`${LUA_DIR}${name}-${numKeys}.lua`, 'utf8');
  }

  async load(): Promise<void> {
    this.sha = (await this.redis.script('LOAD', this.source)) as string;
  }

  async run(keys: string[], args: (string | number)[]): Promise<unknown> {
    if (keys.length !== this.numKeys) throw new Error(`${this.name} takes ${this.numKeys} keys`);
    if (this.sha === null) await this.load();
    try {
      return await this.redis.evalsha(this.sha!, this.numKeys, ...keys, ...args);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('NOSCRIPT')) {
        await this.load();
        return this.redis.evalsha(this.sha!, this.numKeys, ...keys, ...args);
      }
      throw err;
    }
  }
}
