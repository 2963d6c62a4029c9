/**
 * A webhook receiver on Fastify 5. Run: `WEBHOOK_SIGNING_SECRET=whsec_… PORT=8080 node
 * dist/packages/receiver/examples/fastify.js`.
 *
 * Fastify parses JSON bodies by default, and a re-serialized body never verifies: inside an
 * encapsulated plugin the JSON parser is replaced by one that keeps the bytes
 * (`parseAs: 'buffer'`), so the rest of the app still gets parsed JSON. In your project import
 * from '@usage-billing/receiver'.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { pathToFileURL } from 'node:url';
import { SIGNATURE_HEADER } from '../src/index.js';
import { type ExampleOptions, handle, mainOptions } from './node-http.js';

export function createFastifyApp(opts: ExampleOptions): FastifyInstance {
  const app = Fastify({ bodyLimit: opts.maxBodyBytes ?? 1 << 20 });
  void app.register(async (scope) => {
    scope.removeContentTypeParser('application/json');
    scope.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scope.post('/webhooks', async (req, reply) => {
      if (!Buffer.isBuffer(req.body)) return reply.code(415).send({ error: 'expected Content-Type: application/json' });
      const [status, body] = await handle(opts, req.body, req.headers[SIGNATURE_HEADER]);
      return reply.code(status).send(body);
    });
  });
  return app;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const port = Number(process.env.PORT ?? 8080);
  createFastifyApp(mainOptions())
    .listen({ port, host: '0.0.0.0' })
    .then(() => console.log(`listening on :${port}, POST /webhooks`));
}
