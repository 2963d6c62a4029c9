/**
 * A tiny authoritative DNS server on loopback UDP (node:dgram) for tests: answers A and AAAA
 * queries for the names it is given (RFC 1035 wire format), NXDOMAIN for other names, an
 * empty NOERROR answer for a known name without records of the asked type. It records every
 * query, so a test can count how often a name was resolved; names set with `silence` get no
 * answer at all (an unresponsive authoritative server). Lets tests use host names that
 * resolve to several addresses (IPv4 and IPv6) without touching /etc/hosts; the service is
 * pointed at it with WEBHOOK_DNS_SERVERS=127.0.0.1:<port>.
 */
import dgram from 'node:dgram';
import { isIPv4, isIPv6 } from 'node:net';

export interface DnsRecords {
  a?: string[];
  aaaa?: string[];
}

const REBIND = '\u0000after:';
const TYPE_A = 1;
const TYPE_AAAA = 28;

function ipv4Bytes(ip: string): Buffer {
  return Buffer.from(ip.split('.').map(Number));
}

function ipv6Bytes(ip: string): Buffer {
  const [head, tail] = ip.includes('::') ? ip.split('::') : [ip, undefined];
  const h = head ? head.split(':') : [];
  const t = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...new Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

export class DnsResponder {
  private readonly socket = dgram.createSocket('udp4');
  private readonly records = new Map<string, DnsRecords>();
  private readonly silent = new Set<string>();
  readonly queries: { name: string; type: 'A' | 'AAAA' | number }[] = [];
  port = 0;

  /** Sets (or replaces) the records of a name; names are case-insensitive. */
  set(name: string, records: DnsRecords): void {
    for (const ip of records.a ?? []) if (!isIPv4(ip)) throw new TypeError(`not IPv4: ${ip}`);
    for (const ip of records.aaaa ?? []) if (!isIPv6(ip) || ip.includes('.')) throw new TypeError(`not plain IPv6: ${ip}`);
    this.records.set(name.toLowerCase(), records);
  }

  /**
   * DNS rebinding: the first query of each type for `name` is answered with `first`, every
   * later one with `after` (TTL 0 throughout, as a rebinding attacker's server would).
   */
  rebind(name: string, first: DnsRecords, after: DnsRecords): void {
    this.set(name, first);
    this.set(`${REBIND}${name.toLowerCase()}`, after);
  }

  /** Never answers queries for this name (they are still recorded). */
  silence(name: string): void {
    this.silent.add(name.toLowerCase());
  }

  /** How many queries of `type` for `name` were received. */
  count(name: string, type?: 'A' | 'AAAA'): number {
    return this.queries.filter((q) => q.name === name.toLowerCase() && (type === undefined || q.type === type)).length;
  }

  async start(): Promise<this> {
    this.socket.on('message', (msg, rinfo) => {
      const reply = this.answer(msg);
      if (reply) this.socket.send(reply, rinfo.port, rinfo.address);
    });
    await new Promise<void>((r) => this.socket.bind(0, '127.0.0.1', r));
    this.port = this.socket.address().port;
    return this;
  }

  get server(): string {
    return `127.0.0.1:${this.port}`;
  }

  close(): Promise<void> {
    return new Promise((r) => this.socket.close(() => r()));
  }

  private answer(msg: Buffer): Buffer | null {
    if (msg.length < 12 || msg.readUInt16BE(4) !== 1) return null;
    let off = 12;
    const labels: string[] = [];
    while (off < msg.length && msg[off] !== 0) {
      const len = msg[off]!;
      if (len > 63) return null;
      labels.push(msg.subarray(off + 1, off + 1 + len).toString('latin1'));
      off += 1 + len;
    }
    off += 1;
    if (off + 4 > msg.length) return null;
    const qtype = msg.readUInt16BE(off);
    const questionEnd = off + 4;
    const name = labels.join('.').toLowerCase();
    this.queries.push({ name, type: qtype === TYPE_A ? 'A' : qtype === TYPE_AAAA ? 'AAAA' : qtype });
    if (this.silent.has(name)) return null;
    const later = this.records.get(`${REBIND}${name}`);
    const rec = later && this.queries.filter((q) => q.name === name && q.type === this.queries.at(-1)!.type).length > 1 ? later : this.records.get(name);
    const addrs = !rec ? [] : qtype === TYPE_A ? (rec.a ?? []).map(ipv4Bytes) : qtype === TYPE_AAAA ? (rec.aaaa ?? []).map(ipv6Bytes) : [];
    const header = Buffer.alloc(12);
    header.writeUInt16BE(msg.readUInt16BE(0), 0); // id
    const rd = msg.readUInt16BE(2) & 0x0100;
    header.writeUInt16BE(0x8000 | 0x0400 | rd | 0x0080 | (rec ? 0 : 3), 2); // QR, AA, RD, RA, rcode
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(addrs.length, 6);
    const answers = addrs.map((rdata) => {
      const rr = Buffer.alloc(12);
      rr.writeUInt16BE(0xc00c, 0); // pointer to the question's name
      rr.writeUInt16BE(qtype, 2);
      rr.writeUInt16BE(1, 4); // IN
      rr.writeUInt32BE(0, 6); // TTL 0: never cached
      rr.writeUInt16BE(rdata.length, 10);
      return Buffer.concat([rr, rdata]);
    });
    return Buffer.concat([header, msg.subarray(12, questionEnd), ...answers]);
  }
}
