// The official `openai` npm SDK as a real client of Kvasir's server (run by openai_sdk_test.cc).
// Environment: KVASIR_OPENAI_SDK (the folder scripts/install-openai-sdk.sh installed into),
// KVASIR_BASE_URL (http://127.0.0.1:PORT/v1), KVASIR_API_KEY, KVASIR_MODEL.
// Prints "ok <check>" per check and exits 0, or prints the failure and exits 1.
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

try {
  await check('models.list', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [model]);
  });

  await check('completions.create', async () => {
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8,
                                                temperature: 0, logprobs: 2 });
    assert.equal(r.object, 'text_completion');
    assert.equal(typeof r.choices[0].text, 'string');
    assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    assert.equal(typeof r.usage.cost_usd, 'number');
  });

  let chatText = null;
  await check('chat.completions.create', async () => {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 16,
      temperature: 0, logprobs: true, top_logprobs: 2 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    chatText = r.choices[0].message.content;
    assert.equal(typeof chatText, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.equal(r.choices[0].logprobs.content.length, r.usage.completion_tokens);
    assert.equal(r.choices[0].logprobs.content[0].top_logprobs.length, 2);
    assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
  });

  await check('chat.completions stream', async () => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 16,
      temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = '', role = null, usage = null, finish = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        if (c.delta.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, chatText);
    assert.ok(finish);
    assert.ok(usage && usage.completion_tokens > 0);
  });

  await check('completions stream', async () => {
    const stream = await client.completions.create({ model, prompt: 'The dog', max_tokens: 10,
                                                     temperature: 0, stream: true });
    let text = '';
    for await (const chunk of stream) for (const c of chunk.choices) text += c.text;
    const full = await client.completions.create({ model, prompt: 'The dog', max_tokens: 10,
                                                   temperature: 0 });
    assert.equal(text, full.choices[0].text);
  });

  await check('errors', async () => {
    await assert.rejects(
        client.completions.create({ model, prompt: 'x', temperature: -3 }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }),
                         (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
    const bad = new OpenAI({ baseURL: process.env.KVASIR_BASE_URL, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(),
                         (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  });
  console.log('all ok');
  process.exit(0);
} catch (e) {
  console.log('FAILED: ' + (e && e.stack ? e.stack : e));
  process.exit(1);
}
