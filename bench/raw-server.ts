/**
 * The raw ceiling for the ingress benchmark: a bare uWS server that reads the body
 * (onData, onAborted), JSON.parses it and answers 202 with a body of the service's size.
 * No auth, no validation, no rate limit, no queue.
 *
 *   node dist/bench/raw-server.js [port]      (port 0 or absent: any free port)
 * Prints one line `{"port":N}` on stdout once listening; exits on SIGTERM/SIGINT.
 */
import uWS from 'uWebSockets.js';

const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
// Same shape and size as the service's 202 body.
const ACCEPTED = Buffer.from(JSON.stringify({ ingested: 500, duplicates: 0, failed: 0, errors: [], batchId: 'bat_000000000000000000000' }));

const app = uWS.App();
app.post('/*', (res) => {
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
  });
  const chunks: Buffer[] = [];
  res.onData((chunk, isLast) => {
    // The chunk is only valid inside this callback: copy it.
    chunks.push(Buffer.from(chunk.slice(0)));
    if (!isLast || aborted) return;
    let status = '202 Accepted';
    let body: Buffer | string = ACCEPTED;
    try {
      const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { signals?: unknown[] };
      if (!Array.isArray(parsed.signals)) throw new Error('no signals');
    } catch {
      status = '400 Bad Request';
      body = '{"error":"Bad Request"}';
    }
    res.cork(() => {
      res.writeStatus(status).writeHeader('Content-Type', 'application/json').end(body);
    });
  });
});
app.any('/*', (res) => {
  res.writeStatus('404 Not Found').end();
});

app.listen('127.0.0.1', port, (socket) => {
  if (!socket) {
    process.stderr.write(`cannot listen on 127.0.0.1:${port}\n`);
    process.exit(1);
  }
  process.stdout.write(`${JSON.stringify({ port: uWS.us_socket_local_port(socket) })}\n`);
});

const stop = (): void => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
