/**
 * A webhook receiver on Express 5. Run: `WEBHOOK_SIGNING_SECRET=whsec_… PORT=8080 node
 * dist/packages/receiver/examples/express.js`.
 *
 * The one thing Express needs told: keep the RAW body on this route. `express.json()` would
 * parse it, and a re-serialized body never verifies; `express.raw({type: 'application/json'})`
 * gives the bytes as a Buffer. Mount the route before any app-wide `express.json()`, or keep
 * that one off this path. In your project import from '@usage-billing/receiver'.
 */
import express from 'express';
import { pathToFileURL } from 'node:url';
import { SIGNATURE_HEADER } from '../src/index.js';
import { type ExampleOptions, handle, mainOptions } from './node-http.js';

export function createExpressApp(opts: ExampleOptions): express.Express {
  const app = express();
  app.post('/webhooks', express.raw({ type: 'application/json', limit: opts.maxBodyBytes ?? 1 << 20 }), async (req, res) => {
    if (!Buffer.isBuffer(req.body)) {
      res.status(415).json({ error: 'expected Content-Type: application/json' });
      return;
    }
    const [status, body] = await handle(opts, req.body, req.headers[SIGNATURE_HEADER]);
    res.status(status).json(body);
  });
  return app;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const port = Number(process.env.PORT ?? 8080);
  createExpressApp(mainOptions()).listen(port, () => console.log(`listening on :${port}, POST /webhooks`));
}
