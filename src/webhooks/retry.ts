/** Delays between delivery attempts (attempt 1 is immediate): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h — 8 attempts over ~27.6 hours. */
export const DEFAULT_RETRY_SCHEDULE_MS: readonly number[] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];
