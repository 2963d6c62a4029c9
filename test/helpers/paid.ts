/**
 * The official client `@paid-ai/paid-node`, as the tests that drive the service through it use
 * it unchanged: a client for a key, and the client's refusal of a call.
 */
import { PaidClient, PaidError } from '@paid-ai/paid-node';

/** A client of the service at `base` with an organization API key, as a producer makes one. */
export const paidClient = (base: string, key: string, opts: { maxRetries?: number } = {}): PaidClient => new PaidClient({ token: key, baseUrl: `${base}/api/v2`, ...opts });

/** What a call that must fail threw, as the client's PaidError; a success or another error throws. */
export async function paidError(p: Promise<unknown>): Promise<PaidError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof PaidError) return err;
    throw err;
  }
  throw new Error('the call succeeded');
}
