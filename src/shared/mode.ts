/** The two data modes of every organization (spec: live and test keys see separate data). */
export type Mode = 'live' | 'test';

export const MODES: readonly Mode[] = ['live', 'test'];

export const isMode = (x: unknown): x is Mode => x === 'live' || x === 'test';
