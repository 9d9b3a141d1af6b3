// The official `openai` npm SDK's embeddings.create against Kvasir's /v1/embeddings (run by
// embeddings_test.cc). Environment: KVASIR_OPENAI_SDK (the folder scripts/install-openai-sdk.sh
// installed into), KVASIR_BASE_URL (http://127.0.0.1:PORT/v1), KVASIR_API_KEY, KVASIR_MODEL.
// Prints "ok <check>" per check and "all ok", exits 0; or prints the failure and exits 1.
// Without encoding_format the SDK asks for base64 and decodes the little-endian float32 bytes
// itself: its vectors must equal the float answer exactly (a float32 printed as JSON and parsed
// back is the same number).
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

const require = createRequire(process.env.KVASIR_OPENAI_SDK + '/');
const OpenAI = require('openai');
const model = process.env.KVASIR_MODEL;
const client = new OpenAI({
  baseURL: process.env.KVASIR_BASE_URL,
  apiKey: process.env.KVASIR_API_KEY,
  maxRetries: 0,
  timeout: 60_000,
});

async function check(name, fn) {
  await fn();
  console.log('ok ' + name);
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

try {
  let floats = null;
  await check('embeddings.create float', async () => {
    const r = await client.embeddings.create({ model, input: ['a', 'b'], encoding_format: 'float' });
    assert.equal(r.object, 'list');
    assert.equal(r.model, model);
    assert.equal(r.data.length, 2);
    r.data.forEach((d, i) => {
      assert.equal(d.object, 'embedding');
      assert.equal(d.index, i);
      assert.equal(d.embedding.length, 64);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
    });
    assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
    assert.ok(r.usage.prompt_tokens >= 4);  // BOS + at least one token each
    floats = r.data.map((d) => d.embedding);
  });

  await check('embeddings.create default (base64, decoded by the SDK)', async () => {
    const r = await client.embeddings.create({ model, input: ['a', 'b'] });
    assert.equal(r.data.length, 2);
    r.data.forEach((d, i) => {
      assert.ok(Array.isArray(d.embedding), 'the SDK decodes base64 into an array');
      assert.deepEqual(d.embedding, floats[i]);
    });
  });

  await check('embeddings.create base64 asked for', async () => {
    const r = await client.embeddings.create({ model, input: 'a', encoding_format: 'base64' });
    const bytes = Buffer.from(r.data[0].embedding, 'base64');
    const v = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(4 * i));
    assert.deepEqual(v, floats[0]);
  });

  await check('embeddings.create dimensions', async () => {
    for (const encoding_format of ['float', undefined]) {
      const r = await client.embeddings.create({ model, input: ['a', 'b'], dimensions: 8,
                                                 encoding_format });
      r.data.forEach((d, i) => {
        assert.equal(d.embedding.length, 8);
        assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5);
        const n = norm(floats[i].slice(0, 8));
        d.embedding.forEach((x, j) => assert.ok(Math.abs(x - floats[i][j] / n) < 1e-6));
      });
    }
  });

  await check('embeddings.create token ids', async () => {
    const r = await client.embeddings.create({ model, input: [[1, 300, 20], [1, 42]] });
    assert.equal(r.data.length, 2);
    assert.equal(r.usage.prompt_tokens, 5);
  });

  await check('embeddings.create refusal', async () => {
    await assert.rejects(client.embeddings.create({ model, input: 'a', dimensions: 65 }),
                         (e) => e.status === 400 && e.param === 'dimensions');
  });
  console.log('all ok');
  process.exit(0);
} catch (e) {
  console.log('FAILED: ' + (e.stack || e));
  process.exit(1);
}
