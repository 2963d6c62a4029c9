/**
 * What an analytics query may contain, as data (the guard in guard.ts applies it).
 *
 * - Node types: an allowlist of the syntax-tree nodes of SELECT queries. Anything else
 *   (EXPLAIN in a subquery, query parameters, statements of other kinds) is refused, so an
 *   engine upgrade that adds syntax is refused until reviewed rather than let through.
 * - Table functions: only generators that read nothing (numbers, generate_series, …).
 * - Functions: a denylist of those that read files, dictionaries, other tables, settings,
 *   or reveal the engine, its host, users or other queries. `file()` matters most: chdb
 *   reads any path with it even with readonly=1. test/unit/analytics-policy.test.ts
 *   checks this list against the engine's own `system.functions`, so a new risky function
 *   in a chdb upgrade fails the tests until it is classified.
 */
export const ALLOWED_NODE_TYPES: ReadonlySet<string> = new Set([
  'SelectWithUnionQuery', 'SelectIntersectExceptQuery', 'SelectQuery', 'ExpressionList',
  'TablesInSelectQuery', 'TablesInSelectQueryElement', 'TableExpression', 'TableIdentifier',
  'TableJoin', 'ArrayJoin', 'Identifier', 'Function', 'Literal', 'Asterisk', 'QualifiedAsterisk',
  'ColumnsRegexpMatcher', 'ColumnsListMatcher', 'QualifiedColumnsRegexpMatcher', 'QualifiedColumnsListMatcher',
  'ColumnsTransformerList', 'ColumnsApplyTransformer', 'ColumnsExceptTransformer', 'ColumnsReplaceTransformer',
  'ColumnsReplaceTransformer::Replacement', 'Subquery', 'WithElement', 'OrderByElement', 'InterpolateElement',
  'SampleRatio', 'WindowDefinition', 'WindowListElement',
]);

/** Table functions that generate rows from their arguments alone. */
export const ALLOWED_TABLE_FUNCTIONS: ReadonlySet<string> = new Set([
  'numbers', 'numbers_mt', 'zeros', 'zeros_mt', 'generate_series', 'generateseries', 'values',
]);

/** Lower-case names; ClickHouse matches some function names case-insensitively. */
export const DENIED_FUNCTIONS: ReadonlySet<string> = new Set(
  [
    // files, models, external services
    'file', 'catboostEvaluate', 'evalMLMethod', 'aiClassify', 'aiGenerate', 'aiEmbed', 'aiExtract', 'aiTranslate',
    // other tables and dictionaries (dict* and __* are denied by prefix below)
    'joinGet', 'joinGetOrNull', 'hasColumnInTable', 'getMaxTableNameLengthForDatabase',
    'regionToName', 'regionIn', 'regionToTopContinent', 'regionToArea', 'regionToCity', 'regionToCountry',
    'regionHierarchy', 'regionToContinent', 'regionToPopulation', 'regionToDistrict',
    // settings (the organization scope travels in a setting) and server configuration
    'getSetting', 'getSettingOrDefault', 'getServerSetting', 'getMergeTreeSetting', 'getMacro', 'globalVariable',
    // the engine, its host and its storage
    'currentDatabase', 'current_database', 'database', 'schema', 'currentSchemas', 'current_schemas',
    'hostName', 'hostname', 'fqdn', 'fullHostName', 'displayName', 'getServerPort', 'tcpPort', 'uptime',
    'version', 'revision', 'buildId', 'serverUUID', 'getOSKernelVersion', 'showCertificate',
    'filesystemAvailable', 'filesystemCapacity', 'filesystemUnreserved', 'zookeeperSessionUptime',
    'shardNum', 'shardCount', 'hasThreadFuzzer', 'getClientHTTPHeader',
    'mergeTreePartInfo', 'isMergeTreePartCoveredBy', 'partitionId', 'partitionID',
    // users, sessions and other queries
    'currentUser', 'current_user', 'user', 'session_user', 'authUser', 'authenticatedUser',
    'currentProfiles', 'enabledProfiles', 'defaultProfiles', 'currentRoles', 'enabledRoles', 'defaultRoles',
    'queryID', 'query_id', 'currentQueryID', 'current_query_id', 'initialQueryID', 'initial_query_id',
    'initialQueryStartTime', 'initial_query_start_time', 'connectionId', 'connection_id',
    'transactionID', 'transactionLatestSnapshot', 'transactionOldestSnapshot',
    // introspection of the process
    'addressToLine', 'addressToLineWithInlines', 'addressToSymbol', 'demangle', 'logTrace', 'tid',
  ].map((n) => n.toLowerCase()),
);

export const DENIED_FUNCTION_PREFIXES: readonly string[] = ['dict', '__'];

/** Functions whose second argument may name a table: `x IN table`. */
export const IN_FUNCTIONS: ReadonlySet<string> = new Set([
  'in', 'notin', 'globalin', 'globalnotin', 'nullin', 'notnullin', 'globalnullin', 'globalnotnullin',
]);

export function isDeniedFunction(name: string): boolean {
  const n = name.toLowerCase();
  return DENIED_FUNCTIONS.has(n) || DENIED_FUNCTION_PREFIXES.some((p) => n.startsWith(p));
}
