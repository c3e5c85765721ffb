// Checks docs/asyncapi.yaml: first as an AsyncAPI 3 document, with the AsyncAPI parser and its
// rules (what `asyncapi validate` of the AsyncAPI CLI runs; errors and warnings fail), then
// against the code that produces the events:
//   - every message example validates against its message's payload schema;
//   - the event types of internal/events (its constants) are exactly the documented ones;
//   - every JSON field of events.Event is a documented property;
//   - the events internal/events' tests expect the code to produce (the golden JSON of
//     TestFromEntry) validate against the schema of their type and use documented fields only.
// Usage: node check.mjs <repository root>
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Parser, DiagnosticSeverity } from '@asyncapi/parser';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import YAML from 'yaml';

const root = process.argv[2] || '.';
const read = (p) => readFileSync(join(root, p), 'utf8');
const text = read('docs/asyncapi.yaml');
const eventsGo = read('internal/events/events.go');
const eventsTest = read('internal/events/events_test.go');

let failures = 0;
const fail = (msg) => { console.error(`asyncapi-check: ${msg}`); failures++; };

const diagnostics = await new Parser().validate(text, { source: join(root, 'docs/asyncapi.yaml') });
for (const d of diagnostics) {
  const where = `docs/asyncapi.yaml:${d.range.start.line + 1}`;
  const line = `${where}: ${DiagnosticSeverity[d.severity]}: ${d.message} (${d.code}${d.path.length ? ` at ${d.path.join('.')}` : ''})`;
  if (d.severity <= DiagnosticSeverity.Warning) fail(line);
  else console.log(`asyncapi-check: ${line}`);
}
if (failures) process.exit(1);
const doc = YAML.parse(text);

// The document's schemas under one $id, its local refs rewritten to point there.
const schemas = doc.components.schemas;
const rewrite = (v) => {
  if (Array.isArray(v)) return v.map(rewrite);
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) =>
      [k, k === '$ref' ? x.replace('#/components/schemas/', 'asyncapi#/definitions/') : rewrite(x)]));
  }
  return v;
};
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
ajv.addSchema({ $id: 'asyncapi', definitions: rewrite(schemas) });
const schemaName = (ref) => ref.replace('#/components/schemas/', '');
const validator = (name) => ajv.getSchema(`asyncapi#/definitions/${name}`);
const explain = (v) => ajv.errorsText(v.errors, { dataVar: 'event' });

// Messages by the event type their payload pins (allOf ... properties.type.const).
const typeOf = (name) => {
  const s = schemas[name];
  for (const part of s.allOf || []) {
    if (part.$ref) {
      const t = typeOf(schemaName(part.$ref));
      if (t) return t;
    } else if (part.properties?.type?.const) {
      return part.properties.type.const;
    }
  }
  return undefined;
};
const byType = new Map();
for (const [key, msg] of Object.entries(doc.components.messages)) {
  const name = schemaName(msg.payload.$ref);
  const v = validator(name);
  if (!v) { fail(`message ${key}: payload ${msg.payload.$ref} is not a schema`); continue; }
  const type = typeOf(name);
  if (type) byType.set(type, { key, v });
  if (!msg.examples?.length) fail(`message ${key} has no example`);
  for (const ex of msg.examples || []) {
    if (!v(ex.payload)) fail(`message ${key}, example "${ex.name}": ${explain(v)}`);
  }
}

const documented = new Set(Object.keys(schemas.Event.properties));
const enumTypes = new Set(schemas.Event.properties.type.enum);

// The code's event types.
const codeTypes = new Set([...eventsGo.matchAll(/^\s+\w+\s*=\s*"((?:item|stock|order|rating|payment|queue|sale)\.[a-z]+)"$/gm)].map((m) => m[1]));
if (codeTypes.size === 0) fail('found no event type constants in internal/events/events.go');
for (const t of codeTypes) {
  if (!enumTypes.has(t)) fail(`event type ${t} of internal/events is not in Event.type's enum`);
  if (!byType.has(t)) fail(`event type ${t} of internal/events has no message`);
}
for (const t of enumTypes) if (!codeTypes.has(t)) fail(`documented event type ${t} is not in internal/events`);

// The code's fields: the json tags of the Event struct.
const struct = eventsGo.match(/^type Event struct \{([\s\S]*?)^\}/m);
const fields = struct ? [...struct[1].matchAll(/json:"([a-z_]+)/g)].map((m) => m[1]) : [];
if (fields.length === 0) fail('found no fields of events.Event in internal/events/events.go');
for (const f of fields) if (!documented.has(f)) fail(`field ${f} of events.Event is not documented in Event`);

// The golden events: TestFromEntry's wanted JSON, each alone on its line.
const golden = [...eventsTest.matchAll(/^\t+`(\{"event_id"[^`]*\})`\},?$/gm)].map((m) => JSON.parse(m[1]));
if (golden.length < 4) fail(`found ${golden.length} golden events in internal/events/events_test.go (TestFromEntry); the check needs its wanted JSON`);
for (const ev of golden) {
  const m = byType.get(ev.type);
  if (!m) { fail(`golden event ${ev.event_id}: no message for type ${ev.type}`); continue; }
  if (!m.v(ev)) fail(`golden event ${ev.event_id} (${m.key}): ${explain(m.v)}`);
  for (const k of Object.keys(ev)) if (!documented.has(k)) fail(`golden event ${ev.event_id}: field ${k} is not documented`);
}

if (failures) process.exit(1);
console.log(`asyncapi-check: ${byType.size} event types, ${fields.length} fields and ${golden.length} golden events agree with docs/asyncapi.yaml`);
