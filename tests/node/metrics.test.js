// metricsText(): the Prometheus text of every live generator, from Node.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const leafid = require('../..');
const { tmpdir } = require('./helpers');

// Samples by `name{labels}` and families by name -> type, from the text's lines.
function parse(text) {
  assert.ok(text.endsWith('# EOF\n'), 'OpenMetrics text ends with # EOF');
  const samples = new Map();
  const types = new Map();
  for (const line of text.split('\n')) {
    if (line.startsWith('# TYPE ')) {
      const [name, type] = line.slice(7).split(' ');
      types.set(name, type);
    } else if (line && !line.startsWith('#')) {
      const at = line.lastIndexOf(' ');
      const value = Number(line.slice(at + 1));
      assert.ok(!Number.isNaN(value), `a numeric sample: ${line}`);
      samples.set(line.slice(0, at), value);
    }
  }
  return { samples, types };
}

function get(samples, key) {
  assert.ok(samples.has(key), `${key} missing; have ${[...samples.keys()].join('\n')}`);
  return samples.get(key);
}

test('metricsText counts segment ids per tag and errors by code', async () => {
  const gen = await leafid.SegmentGenerator.connect(`sqlite://${tmpdir()}/ids.db`);
  await gen.createTag('node_metrics', { start: 1, step: 1000 });
  const h = gen.tag('node_metrics');
  for (let i = 0; i < 10; i++) gen.nextId('node_metrics');
  assert.equal(h.nextIds(15).length, 15);
  const errors = () => parse(leafid.metricsText()).samples
    .get('leafid_errors_total{mode="segment",code="LEAF_TAG_NOT_FOUND"}') ?? 0;
  const before = errors();
  assert.throws(() => gen.nextId('node_metrics_missing'), { code: 'LEAF_TAG_NOT_FOUND' });
  assert.equal(errors(), before + 1);

  const { samples, types } = parse(leafid.metricsText());
  assert.equal(types.get('leafid_segment_ids_issued'), 'counter');
  assert.equal(get(samples, 'leafid_segment_ids_issued_total{tag="node_metrics"}'), 25);
  const refills = get(samples, 'leafid_segment_refills_total{tag="node_metrics"}');
  assert.ok(refills >= 1);
  assert.equal(get(samples, 'leafid_segment_step{tag="node_metrics"}'), 1000);
  assert.equal(get(samples, 'leafid_segment_initialized{tag="node_metrics"}'), 1);
  assert.equal(types.get('leafid_segment_refill_duration_seconds'), 'histogram');
  assert.equal(get(samples, 'leafid_segment_refill_duration_seconds_bucket{le="+Inf",tag="node_metrics"}'), refills);
  await gen.close();
  assert.ok(!leafid.metricsText().includes('node_metrics'), 'a closed generator leaves the text');
});

test('metricsText counts snowflake ids and shows the lease per worker', async () => {
  const sf = await leafid.SnowflakeGenerator.connect({ registry: 'fixed:905', cacheDir: tmpdir() });
  for (let i = 0; i < 3000; i++) sf.nextId();
  assert.equal(sf.nextIds(1000).length, 1000);
  const { samples } = parse(leafid.metricsText());
  assert.equal(get(samples, 'leafid_snowflake_ids_issued_total{worker_id="905"}'), 4000);
  assert.equal(get(samples, 'leafid_snowflake_lease_state{worker_id="905",state="held"}'), 1);
  assert.equal(get(samples, 'leafid_snowflake_lease_state{worker_id="905",state="lost"}'), 0);
  assert.ok(get(samples, 'leafid_snowflake_bound_lead_seconds{worker_id="905"}') > 0);
  await sf.close();
});

test('the ES module exports metricsText too', async () => {
  const esm = await import('../../bindings-node/index.mjs');
  assert.equal(esm.metricsText, leafid.metricsText);
  assert.equal(typeof esm.metricsText(), 'string');
});
