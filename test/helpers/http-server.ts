/**
 * A plain HTTP server on 127.0.0.1 for one test file (a webhook receiver, say): listening on a
 * free port before the file's tests, its connections cut and the server closed at teardown.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Test } from 'tap';

export interface TestServer {
  readonly server: http.Server;
  /** `http://127.0.0.1:<port>` once listening (empty before). */
  readonly url: string;
}

export function useHttpServer(t: Test, handler: http.RequestListener): TestServer {
  const server = http.createServer(handler);
  let url = '';
  t.before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise<void>((r) => server.close(() => r()));
  });
  return {
    server,
    get url() {
      return url;
    },
  };
}
