/** JSON request bodies: an empty or malformed body is a 400 INVALID_JSON naming the problem. */
import { ApiError } from '../errors.js';

export function parseJson(body: Buffer): unknown {
  if (body.length === 0) throw new ApiError('INVALID_JSON', 'request body is empty; expected JSON');
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new ApiError('INVALID_JSON', `request body is not valid JSON: ${(err as Error).message}`);
  }
}
