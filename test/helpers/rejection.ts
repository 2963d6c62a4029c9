/**
 * The error a promise rejects with, which must be an instance of `type`: any other error is
 * thrown again, and a promise that fulfils is a failure.
 */
export async function rejection<E extends Error>(p: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E> {
  try {
    await p;
  } catch (err) {
    if (err instanceof type) return err;
    throw err;
  }
  throw new Error(`expected a ${type.name}, the promise fulfilled`);
}
