/**
 * Lua scripts kept as files in ./lua, named `<command>-<numberOfKeys>.lua` (BullMQ's habit).
 * Each is registered with SCRIPT LOAD and then called with EVALSHA. Redis may lack the
 * script: a restart, SCRIPT FLUSH, a replica just promoted by Sentinel, or — on a Redis
 * Cluster — the node owning the key's slot, which is not where it was loaded (slots move,
 * nodes join). The NOSCRIPT reply then makes us run it once with EVAL, sent like EVALSHA
 * to the node owning the key, which caches the script on that node for the next EVALSHA.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Cluster } from 'ioredis';
import type { RedisClient } from './connect.js';

const LUA_DIR = fileURLToPath(new URL('./lua/', import.meta.url));

export class LuaScript {
  readonly source: string;
  /** SHA1 of the source: what SCRIPT LOAD answers on every node, so known without asking. */
  readonly sha: string;

  constructor(
    private readonly redis: RedisClient,
    readonly name: string,
    readonly numKeys: number,
  ) {
    this.source = readFileSync(`${LUA_DIR}${name}-${numKeys}.lua`, 'utf8');
    this.sha = createHash('sha1').update(this.source).digest('hex');
  }

  /** Registers the script on the server, or on every primary of a cluster. */
  async load(): Promise<void> {
    const targets = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.redis];
    await Promise.all(targets.map((node) => node.script('LOAD', this.source)));
  }

  async run(keys: string[], args: (string | number)[]): Promise<unknown> {
    if (keys.length !== this.numKeys) throw new Error(`${this.name} takes ${this.numKeys} keys`);
    try {
      return await this.redis.evalsha(this.sha, this.numKeys, ...keys, ...args);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('NOSCRIPT')) {
        return this.redis.eval(this.source, this.numKeys, ...keys, ...args);
      }
      throw err;
    }
  }
}
