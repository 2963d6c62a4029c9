/**
 * harness/service.ts SERVICE_ENV: settings for the processes the benches and tests start,
 * `NAME=value` pairs separated by whitespace (a bench measures a setting without a build).
 */
import t from 'tap';
import { serviceEnvOverrides } from '../../harness/service.js';

t.test('SERVICE_ENV: NAME=value pairs; unset or blank adds nothing; a pair without a name or "=" is refused', async (t) => {
  t.same(serviceEnvOverrides(undefined), {});
  t.same(serviceEnvOverrides('  '), {});
  t.same(serviceEnvOverrides('PIPELINE_FLUSH_ROWS=20000  BILLING_PARTITIONS=4'), { PIPELINE_FLUSH_ROWS: '20000', BILLING_PARTITIONS: '4' });
  t.same(serviceEnvOverrides('A=x=y B='), { A: 'x=y', B: '' }, 'the value is everything after the first "=", possibly empty');
  t.throws(() => serviceEnvOverrides('PIPELINE_FLUSH_ROWS'), /SERVICE_ENV: "PIPELINE_FLUSH_ROWS" is not NAME=value/);
  t.throws(() => serviceEnvOverrides('=5'), /SERVICE_ENV: "=5" is not NAME=value/);
});
