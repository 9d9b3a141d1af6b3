// Structured output and tool calls through the official `openai` npm SDK (run by
// structured_output_sdk_test.cc) against stories260K, a model that knows no JSON: only the grammar
// makes its answers valid. Every answer is checked by ajv (an independent JSON Schema validator)
// or by zod, never by Kvasir's own code.
// Environment: KVASIR_OPENAI_SDK (the folder scripts/install-openai-sdk.sh installed into, with
// zod, ajv and ajv-formats), KVASIR_BASE_URL (a server with the Hermes-3 tool-use template, which
// renders only requests with tools), KVASIR_BASE_URL_LLAMA3 (one with the Llama 3.3 template),
// KVASIR_MODEL, KVASIR_SCHEMAS (the JSON file of {name, schema} entries), KVASIR_BRACE_TOKEN (the
// id of the "}" token, for json_object mode), KVASIR_EOS_TOKEN.
// Prints "ok <check>" per check and exits 0, or prints the failure and exits 1.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const require = createRequire(process.env.KVASIR_OPENAI_SDK + '/');
const OpenAI = require('openai');
const { zodResponseFormat } = require('openai/helpers/zod');
const { z } = require('zod');
// JSON Schema 2020-12 (prefixItems, $defs), as OpenAI's structured outputs use.
const Ajv = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const model = process.env.KVASIR_MODEL;
const options = { apiKey: 'unused', maxRetries: 0, timeout: 120_000 };
const hermes = new OpenAI({ ...options, baseURL: process.env.KVASIR_BASE_URL });
const llama3 = new OpenAI({ ...options, baseURL: process.env.KVASIR_BASE_URL_LLAMA3 });
const schemas = JSON.parse(readFileSync(process.env.KVASIR_SCHEMAS, 'utf8'));

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
function validate(schema, value, what) {
  const v = ajv.compile(schema);
  assert.ok(v(value), `${what}: ${JSON.stringify(value)} does not validate: ` +
                      JSON.stringify(v.errors));
}

async function check(name, fn) {
  await fn();
  console.log('ok ' + name);
}

const user = [{ role: 'user', content: 'Tell me about Lily and her dog.' }];

try {
  assert.equal(schemas.length, 20);
  // 1. chat.completions.parse with each schema, greedy and sampled.
  for (const [i, { name, schema }] of schemas.entries()) {
    for (const temperature of [0, 0.9]) {
      await check(`parse schema ${i + 1} (${name}) at temperature ${temperature}`, async () => {
        const r = await llama3.chat.completions.parse({
          model, messages: user, temperature, seed: 11 + i, max_tokens: 600,
          response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
        });
        const m = r.choices[0].message;
        assert.equal(r.choices[0].finish_reason, 'stop');
        assert.notEqual(m.parsed, null);
        validate(schema, m.parsed, name);
        assert.deepEqual(m.parsed, JSON.parse(m.content));
      });
    }
  }

  // 2. Streaming: the concatenated deltas are one valid document.
  for (const i of [0, 9, 19]) {
    const { name, schema } = schemas[i];
    await check(`stream schema ${i + 1} (${name})`, async () => {
      const stream = await llama3.chat.completions.create({
        model, messages: user, temperature: 0.7, seed: 5, max_tokens: 600, stream: true,
        response_format: { type: 'json_schema', json_schema: { name, schema, strict: true } },
      });
      let text = '', finish = null;
      for await (const c of stream) {
        if (c.choices.length === 0) continue;
        text += c.choices[0].delta.content ?? '';
        finish = c.choices[0].finish_reason ?? finish;
      }
      assert.equal(finish, 'stop');
      validate(schema, JSON.parse(text), name);
    });
  }

  // 3. The SDK's zod helper, and its streaming helper.
  const Pet = z.object({
    name: z.string().max(10),
    kind: z.enum(['dog', 'cat', 'bird']),
    age: z.number().int(),
    friendly: z.boolean(),
    toys: z.array(z.string().max(8)).max(2),
  });
  await check('parse with zodResponseFormat', async () => {
    const r = await llama3.chat.completions.parse({
      model, messages: user, temperature: 0.5, seed: 3, max_tokens: 400,
      response_format: zodResponseFormat(Pet, 'pet'),
    });
    const p = r.choices[0].message.parsed;
    assert.deepEqual(Pet.parse(p), p);
  });
  await check('stream helper with zodResponseFormat', async () => {
    const runner = llama3.chat.completions.stream({
      model, messages: user, temperature: 0.5, seed: 4, max_tokens: 400,
      response_format: zodResponseFormat(Pet, 'pet'),
    });
    const final = await runner.finalChatCompletion();
    const p = final.choices[0].message.parsed;
    assert.deepEqual(Pet.parse(p), p);
  });

  // 4. json_object mode. Objects of any size are allowed and this story model never chooses to
  // close one (`,` always beats `}` after a value), so a logit_bias on "}" makes it close. The
  // bias is large enough that "}" wins wherever the grammar allows it (after the first value):
  // with +10 the close was sampled, and whether it came within max_tokens depended on the
  // trajectory, which differs between AVX2 and AVX-512 float sums ('length' on Zen 3 here and in
  // CI, 'stop' on the machine the test was written on).
  await check('json_object', async () => {
    const r = await llama3.chat.completions.create({
      model, messages: user, temperature: 1, seed: 3, max_tokens: 500,
      logit_bias: { [process.env.KVASIR_BRACE_TOKEN]: 100 },
      response_format: { type: 'json_object' },
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  });

  // 5. Refusals name the field.
  await check('unsupported schema keyword is a 400 naming it', async () => {
    await assert.rejects(
      llama3.chat.completions.create({
        model, messages: user, max_tokens: 8,
        response_format: { type: 'json_schema', json_schema: {
          name: 'x', schema: { type: 'object', not: { required: ['a'] } } } },
      }),
      (e) => e.status === 400 && /not/.test(e.message) && e.param === 'response_format');
  });

  // 6. Tool calls with both templates: forced (required and named), streamed, and fed back.
  const tools = [
    { type: 'function', function: {
      name: 'get_weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: {
        city: { type: 'string', maxLength: 12 },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'], additionalProperties: false } } },
    { type: 'function', function: {
      name: 'add', description: 'Adds two numbers',
      parameters: { type: 'object', properties: {
        a: { type: 'integer', minimum: 0, maximum: 999 }, b: { type: 'integer', minimum: 0, maximum: 999 } },
        required: ['a', 'b'], additionalProperties: false } } },
  ];
  const paramsOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
  for (const [label, client] of [['hermes', hermes], ['llama3', llama3]]) {
    let call = null;
    await check(`${label}: tool_choice required gives tool_calls`, async () => {
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools,
        tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200,
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls');
      assert.equal(c.message.tool_calls.length, 1);
      call = c.message.tool_calls[0];
    });
    await check(`${label}: parallel tool calls`, async () => {
      // With parallel calls allowed the grammar admits another call after each one, and this
      // story model never chooses to end; a bias on its EOS token (admitted by the grammar only
      // after a whole call) makes it end.
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools,
        tool_choice: 'required', temperature: 0.8, seed: 6, max_tokens: 400,
        logit_bias: { [process.env.KVASIR_EOS_TOKEN]: 14 },
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls');
      // Hermes writes several calls here (2 with this seed); Llama 3.x templates take one.
      assert.ok(c.message.tool_calls.length >= (label === 'hermes' ? 2 : 1),
                JSON.stringify(c.message));
      for (const tc of c.message.tool_calls) {
        assert.equal(tc.type, 'function');
        assert.match(tc.id, /^call_[A-Za-z0-9]{24}$/);
        assert.ok(tc.function.name in paramsOf, tc.function.name);
        validate(paramsOf[tc.function.name], JSON.parse(tc.function.arguments), tc.function.name);
      }
    });
    await check(`${label}: a named tool_choice calls that function`, async () => {
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: 'Add 2 and 3.' }], tools,
        tool_choice: { type: 'function', function: { name: 'add' } }, temperature: 0.7, seed: 2,
        max_tokens: 200,
      });
      const tcs = r.choices[0].message.tool_calls;
      assert.equal(tcs.length, 1);
      assert.equal(tcs[0].function.name, 'add');
      validate(paramsOf.add, JSON.parse(tcs[0].function.arguments), 'add');
    });
    await check(`${label}: streamed tool_calls reassemble`, async () => {
      const req = {
        model, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools,
        tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 200,
      };
      const whole = await client.chat.completions.create(req);
      const stream = await client.chat.completions.create({ ...req, stream: true });
      const calls = [];
      let finish = null;
      for await (const chunk of stream) {
        const d = chunk.choices[0]?.delta;
        finish = chunk.choices[0]?.finish_reason ?? finish;
        for (const tc of d?.tool_calls ?? []) {
          if (!calls[tc.index]) calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: '' };
          calls[tc.index].arguments += tc.function.arguments ?? '';
        }
      }
      assert.equal(finish, 'tool_calls');
      const want = whole.choices[0].message.tool_calls;
      assert.equal(calls.length, want.length);
      for (let i = 0; i < want.length; ++i) {
        assert.equal(calls[i].name, want[i].function.name);
        assert.deepEqual(JSON.parse(calls[i].arguments), JSON.parse(want[i].function.arguments));
      }
    });
    await check(`${label}: the tool result goes back through the template`, async () => {
      const r = await client.chat.completions.create({
        model, tools, temperature: 0, max_tokens: 16,
        messages: [
          { role: 'user', content: 'What is the weather in Paris?' },
          { role: 'assistant', content: null, tool_calls: [call] },
          { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21 }) },
        ],
      });
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
    });
  }
  console.log('all ok');
} catch (e) {
  console.error('FAILED:', e?.stack ?? e);
  process.exit(1);
}
