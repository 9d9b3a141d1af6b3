// Validates deploy/grafana/kvasir-dashboard.json (run by tests/deploy_check.sh).
//
// usage: node tests/deploy_validate_dashboard.mjs DASHBOARD.json SCHEMA.json [--emit-rules OUT]
//
// 1. The dashboard against the JSON Schema (draft 2020-12) with ajv, all errors reported.
// 2. What a schema cannot say: panel ids unique; panels inside the 24-column grid and not
//    overlapping; threshold steps a null base then ascending; refIds unique within a panel; every $variable used by an expression or a
//    variable query is a dashboard variable (defined before the variable that uses it) or one of
//    Grafana's built-ins ($__rate_interval, $__interval, $__range).
// 3. The schema is strict enough: malformed copies of the dashboard (a panel without gridPos, a
//    target without expr, a misspelt property, a panel wider than the grid, a query on another
//    data source) must all be refused.
// 4. With --emit-rules OUT: writes every PromQL expression (targets, and the selectors of
//    label_values() variable queries) as a recording rule into OUT, variables replaced by sample
//    values, so that `promtool check rules OUT` parses each one. (JSON is YAML: promtool reads it.)
//
// ajv comes from KVASIR_OPENAI_SDK (default ${KVASIR_CACHE:-$HOME/.cache/kvasir}/openai, where
// scripts/install-openai-sdk.sh installs it). Prints "ok <check>" per check and exits 0; on a
// failure prints what failed (file, JSON path, what was expected) and exits 1; exits 2 when ajv
// is missing.
import { createRequire } from 'node:module';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

function die(msg, code = 1) {
  console.error('deploy_validate_dashboard: ' + msg);
  process.exit(code);
}

const args = process.argv.slice(2);
let emitRules = null;
const emitAt = args.indexOf('--emit-rules');
if (emitAt >= 0) {
  emitRules = args[emitAt + 1];
  if (!emitRules) die('--emit-rules: expected an output file', 2);
  args.splice(emitAt, 2);
}
if (args.length !== 2) die('usage: deploy_validate_dashboard.mjs DASHBOARD.json SCHEMA.json ' +
                           '[--emit-rules OUT]', 2);
const [dashPath, schemaPath] = args;

const sdk = process.env.KVASIR_OPENAI_SDK ||
            (process.env.KVASIR_CACHE || (process.env.HOME || '') + '/.cache/kvasir') + '/openai';
if (!existsSync(sdk + '/node_modules/ajv/package.json'))
  die(`ajv is not installed in ${sdk}/node_modules; run scripts/install-openai-sdk.sh ` +
      '(or set KVASIR_OPENAI_SDK to a folder with node_modules/ajv)', 2);
const require = createRequire(sdk + '/');
const Ajv2020 = require('ajv/dist/2020');

function readJson(path) {
  let text;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    die(`${path}: cannot read: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    die(`${path}: not valid JSON: ${e.message}`);
  }
}

const dashboard = readJson(dashPath);
const schema = readJson(schemaPath);
// strictRequired off: if/then branches require properties their parent schema defines.
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
let validate;
try {
  validate = ajv.compile(schema);
} catch (e) {
  die(`${schemaPath}: not a valid JSON Schema: ${e.message}`);
}

function schemaErrors(doc) {
  if (validate(doc)) return [];
  return validate.errors.map(e => `${e.instancePath || '/'}: ${e.message}` +
                                  (e.params && Object.keys(e.params).length
                                       ? ' ' + JSON.stringify(e.params) : ''));
}

// --- 1. Schema ------------------------------------------------------------------------------
{
  const errors = schemaErrors(dashboard);
  if (errors.length)
    die(`${dashPath} does not match ${schemaPath}:\n  ` + errors.join('\n  '));
  console.log('ok schema');
}

// --- 2. What the schema cannot say ------------------------------------------------------------
const BUILTINS = new Set(['__rate_interval', '__interval', '__range', '__interval_ms',
                          '__range_s', '__range_ms']);
function variablesUsed(text) {
  const out = [];
  for (const m of text.matchAll(/\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|([A-Za-z_][A-Za-z0-9_]*))/g))
    out.push(m[1] || m[2]);
  return out;
}

function semanticErrors(d) {
  const errors = [];
  const defined = new Set();
  d.templating.list.forEach((v, i) => {
    const q = typeof v.query === 'string' ? v.query : (v.query && v.query.query) || '';
    for (const name of variablesUsed(q + ' ' + (v.definition || '')))
      if (!BUILTINS.has(name) && !defined.has(name))
        errors.push(`/templating/list/${i} (${v.name}): uses $${name}, which is not a variable ` +
                    'defined before it');
    if (defined.has(v.name)) errors.push(`/templating/list/${i}: variable ${v.name} defined twice`);
    defined.add(v.name);
  });
  const ids = new Map();
  const cells = new Map();  // "x,y" -> panel id: overlap check
  d.panels.forEach((p, i) => {
    const where = `/panels/${i} (id ${p.id}, "${p.title}")`;
    if (ids.has(p.id)) errors.push(`${where}: id ${p.id} is also panel ${ids.get(p.id)}'s`);
    ids.set(p.id, i);
    const g = p.gridPos;
    if (g.x + g.w > 24) errors.push(`${where}: gridPos x ${g.x} + w ${g.w} exceeds 24 columns`);
    for (let y = g.y; y < g.y + g.h; y++)
      for (let x = g.x; x < Math.min(24, g.x + g.w); x++) {
        const other = cells.get(`${x},${y}`);
        if (other !== undefined) {
          errors.push(`${where}: overlaps panel id ${other} at column ${x}, row ${y}`);
          return;
        }
        cells.set(`${x},${y}`, p.id);
      }
    const steps = p.fieldConfig?.defaults?.thresholds?.steps ?? [];
    steps.forEach((s, j) => {
      if (j === 0 ? s.value !== null : typeof s.value !== 'number' ||
                        (j > 1 && !(s.value > steps[j - 1].value)))
        errors.push(`${where}/fieldConfig/defaults/thresholds/steps/${j}: expected ` +
                    (j === 0 ? 'value null (the base color)' : 'a number above the previous step'));
    });
    const refs = new Set();
    (p.targets || []).forEach((t, j) => {
      if (refs.has(t.refId)) errors.push(`${where}/targets/${j}: refId ${t.refId} repeated`);
      refs.add(t.refId);
      for (const name of variablesUsed(t.expr))
        if (!BUILTINS.has(name) && !defined.has(name))
          errors.push(`${where}/targets/${j}: expr uses $${name}, which is not a dashboard ` +
                      'variable');
    });
  });
  return errors;
}
{
  const errors = semanticErrors(dashboard);
  if (errors.length) die(`${dashPath}:\n  ` + errors.join('\n  '));
  console.log('ok ids, grid, thresholds, refIds and variables');
}

// --- 3. The schema refuses malformed panels ---------------------------------------------------
{
  const firstQuery = dashboard.panels.findIndex(p => p.type !== 'row');
  const mutations = {
    'a panel without gridPos': d => { delete d.panels[firstQuery].gridPos; },
    'a panel without title': d => { delete d.panels[firstQuery].title; },
    'a panel with a misspelt property': d => { d.panels[firstQuery].gridpos = { h: 1 }; },
    'a panel of an unknown type': d => { d.panels[firstQuery].type = 'graph2'; },
    'a panel without targets': d => { delete d.panels[firstQuery].targets; },
    'a panel with no target': d => { d.panels[firstQuery].targets = []; },
    'a target without expr': d => { delete d.panels[firstQuery].targets[0].expr; },
    'a target with an empty expr': d => { d.panels[firstQuery].targets[0].expr = ''; },
    'a target with a bad refId': d => { d.panels[firstQuery].targets[0].refId = 'a1'; },
    'a query on another data source': d => {
      d.panels[firstQuery].targets[0].datasource = { type: 'loki', uid: 'x' };
    },
    'a panel wider than the grid': d => { d.panels[firstQuery].gridPos.w = 25; },
    'a panel at a negative row': d => { d.panels[firstQuery].gridPos.y = -1; },
    'a string id': d => { d.panels[firstQuery].id = '7'; },
    'no uid': d => { delete d.uid; },
    'no schemaVersion': d => { delete d.schemaVersion; },
    'no DS_PROMETHEUS variable': d => {
      d.templating.list = d.templating.list.filter(v => v.name !== 'DS_PROMETHEUS');
    },
    'a row with targets': d => {
      const r = d.panels.findIndex(p => p.type === 'row');
      d.panels[r].targets = d.panels[firstQuery].targets;
    },
  };
  const accepted = [];
  for (const [what, mutate] of Object.entries(mutations)) {
    const copy = structuredClone(dashboard);
    mutate(copy);
    if (schemaErrors(copy).length === 0) accepted.push(what);
  }
  if (accepted.length)
    die(`${schemaPath} accepts malformed dashboards: ` + accepted.join('; '));
  console.log(`ok schema refuses ${Object.keys(mutations).length} malformed copies`);
}

// --- 4. Expressions for promtool -------------------------------------------------------------
if (emitRules) {
  const sample = { __rate_interval: '5m', __interval: '1m', __range: '1h', __interval_ms: '60000',
                   __range_s: '3600', __range_ms: '3600000' };
  const substitute = text => text.replace(
      /\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|([A-Za-z_][A-Za-z0-9_]*))/g,
      (_, a, b) => sample[a || b] ?? '.*');
  const rules = [];
  dashboard.panels.forEach(p => (p.targets || []).forEach(t => rules.push({
    record: `dashboard:panel_${p.id}:${t.refId}`,
    expr: substitute(t.expr),
  })));
  dashboard.templating.list.forEach(v => {
    if (v.type !== 'query') return;
    const m = /^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$/.exec(v.definition);
    if (!m) die(`${dashPath}: variable ${v.name}: expected label_values(SELECTOR, LABEL), got ` +
                `'${v.definition}'`);
    rules.push({ record: `dashboard:variable:${v.name}`, expr: substitute(m[1]) });
  });
  writeFileSync(emitRules, JSON.stringify({ groups: [{ name: 'dashboard', rules }] }, null, 2));
  console.log(`ok wrote ${rules.length} expressions to ${emitRules}`);
}
console.log('all ok');
