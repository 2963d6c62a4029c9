/**
 * Minimal command-line parsing for the benchmarks: `--name value` or `--name=value`,
 * `--flag` alone means true. Unknown options are refused with the list of known ones.
 */
export interface OptionSpec {
  /** Shown by --help. */
  help: string;
  /** Whether the option takes no value. */
  flag?: boolean;
}

export class Args {
  private readonly values = new Map<string, string | true>();

  constructor(
    private readonly usage: string,
    private readonly spec: Record<string, OptionSpec>,
    argv: string[] = process.argv.slice(2),
  ) {
    for (let i = 0; i < argv.length; i++) {
      const a = argv[i]!;
      if (a === '--help' || a === '-h') this.exit(0);
      if (!a.startsWith('--')) this.fail(`unexpected argument ${JSON.stringify(a)}`);
      const eq = a.indexOf('=');
      const name = eq === -1 ? a.slice(2) : a.slice(2, eq);
      const s = spec[name];
      if (!s) this.fail(`unknown option --${name}`);
      if (s.flag) {
        if (eq !== -1) this.fail(`--${name} takes no value`);
        this.values.set(name, true);
      } else if (eq !== -1) {
        this.values.set(name, a.slice(eq + 1));
      } else {
        const v = argv[++i];
        if (v === undefined) this.fail(`--${name} needs a value`);
        this.values.set(name, v);
      }
    }
  }

  private exit(code: number): never {
    const lines = [`usage: ${this.usage}`, '', ...Object.entries(this.spec).map(([k, s]) => `  --${k.padEnd(20)} ${s.help}`)];
    (code === 0 ? process.stdout : process.stderr).write(`${lines.join('\n')}\n`);
    process.exit(code);
  }

  private fail(msg: string): never {
    process.stderr.write(`${msg}\n`);
    return this.exit(2);
  }

  str(name: string): string | undefined {
    const v = this.values.get(name);
    return typeof v === 'string' ? v : undefined;
  }

  flag(name: string): boolean {
    return this.values.get(name) === true;
  }

  /** A number within [min, max], or the default when absent. */
  num(name: string, def: number, min: number, max: number): number;
  num(name: string, def: undefined, min: number, max: number): number | undefined;
  num(name: string, def: number | undefined, min: number, max: number): number | undefined {
    const raw = this.str(name);
    if (raw === undefined) return def;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min || n > max) this.fail(`--${name}=${raw}: must be a number between ${min} and ${max}`);
    return n;
  }
}
