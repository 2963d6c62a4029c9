/**
 * Bounds of an organization's limits: the admin API validates against them, the OpenAPI
 * document publishes them and the configuration's defaults are checked against them.
 */
export const LIMIT_BOUNDS = {
  burst: { min: 500, max: 1_000_000_000, integer: true },
  refillPerSecond: { min: 0.001, max: 1_000_000_000, integer: false },
  analyticsConcurrency: { min: 1, max: 1_000, integer: true },
} as const;
