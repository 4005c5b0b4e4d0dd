// The package's description of the wire (WIRE, QUERY, the enums in src/api.ts, which the
// compiler keeps in step with the TypeScript types) against the contract, openapi.json:
// field names, required-ness, the `status` variants and the ErrorCode values. The shapes
// are found from the operations (postToken, getElicitation, cancelElicitation), so a
// renamed schema is followed and a changed one fails here. These are internals, so they
// come from dist/api.js itself, not from an entry point.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ELICITATION_STATUSES, ERROR_CODES, HAND_OUT_MODES, QUERY, TOKEN_STATUSES, WIRE } from '../dist/api.js';

/** The part of JSON Schema and OpenAPI this test reads. */
interface Schema {
  $ref?: string;
  type?: string | string[];
  oneOf?: Schema[];
  allOf?: Schema[];
  enum?: string[];
  properties?: Record<string, Schema>;
  required?: string[];
}
interface Content {
  content: Record<string, { schema: Schema } | undefined>;
}
interface Operation {
  requestBody?: Content;
  responses: Record<string, Content | undefined>;
  parameters?: Array<{ in: string; name: string }>;
}
interface OpenApi {
  paths: Record<string, Record<string, Operation | undefined> | undefined>;
  components: { schemas: Record<string, Schema | undefined> };
}

/** `v`, which the document must have. */
function must<T>(v: T | undefined, what: string): T {
  assert.ok(v !== undefined, `openapi.json has no ${what}`);
  return v;
}

const doc = JSON.parse(readFileSync(new URL('../../../openapi.json', import.meta.url), 'utf8')) as OpenApi;
const deref = (s: Schema | undefined): Schema => {
  const schema = must(s, 'schema');
  return schema.$ref ? deref(doc.components.schemas[schema.$ref.split('/').pop() ?? '']) : schema;
};
/** The one non-null member of `oneOf: [null, X]`, or the schema itself. */
const nonNull = (s: Schema | undefined): Schema => {
  const schema = must(s, 'schema');
  return deref(schema.oneOf ? schema.oneOf.find((m) => m.type !== 'null') : schema);
};
const json = (o: Content | undefined) => nonNull(must(o, 'content').content['application/json']?.schema);
const op = (path: string, method: string) => must(doc.paths[path]?.[method], `${method} ${path}`);
const props = (s: Schema) => must(s.properties, 'properties');
/** The `status` enum of a `TokenAnswer` variant (`allOf: [variant, { status }]`). */
const statusOf = (m: Schema) => must(props(must(m.allOf?.[1], 'allOf[1]')).status?.enum, 'status enum');

const postToken = op('/v1/token', 'post');
const getElicitation = op('/v1/elicitations/{id}', 'get');
const cancelElicitation = op('/v1/elicitations/{id}/cancel', 'post');
const answer = json(postToken.responses['200']);
const variant = (status: string) => {
  const v = must(answer.oneOf, 'oneOf').find((m) => statusOf(m).includes(status));
  return deref(v?.allOf?.[0]);
};

function agrees(name: keyof typeof WIRE, schema: Schema) {
  const fields: Record<string, boolean> = WIRE[name];
  assert.deepEqual(Object.keys(props(schema)).sort(), Object.keys(fields).sort(), `${name}: field names`);
  const required = Object.entries(fields)
    .filter(([, r]) => r)
    .map(([k]) => k)
    .sort();
  assert.deepEqual([...(schema.required ?? [])].sort(), required, `${name}: required fields`);
}

test('the postToken request body', () => {
  agrees('TokenBody', json(postToken.requestBody));
});

test('the postToken answer: the status variants and each variant', () => {
  assert.deepEqual(
    must(answer.oneOf, 'oneOf').map((m) => statusOf(m)[0]),
    [...TOKEN_STATUSES],
  );
  agrees('Connected', variant('connected'));
  assert.deepEqual(deref(props(variant('connected')).hand_out).enum, [...HAND_OUT_MODES], 'Connected: the hand_out modes');
  agrees('Account', nonNull(props(variant('connected')).account));
  agrees('ConnectRequired', variant('connect_required'));
  agrees('ElicitationLink', deref(props(variant('connect_required')).elicitation));
  agrees('McpElicitation', deref(props(variant('connect_required')).mcp));
  agrees('Declined', variant('declined'));
});

test('getElicitation: the answer, its status values and the query parameters', () => {
  const e = json(getElicitation.responses['200']);
  agrees('Elicitation', e);
  assert.deepEqual(deref(props(e).status).enum, [...ELICITATION_STATUSES]);
  const query = must(getElicitation.parameters, 'parameters')
    .filter((p) => p.in === 'query')
    .map((p) => p.name);
  assert.deepEqual(query, [...QUERY.getElicitation]);
});

test('cancelElicitation: the answer', () => {
  const c = json(cancelElicitation.responses['200']);
  agrees('Cancelled', c);
  assert.deepEqual(deref(props(c).status).enum, [...ELICITATION_STATUSES]);
});

test('cancelElicitation: the request body', () => {
  agrees('CancelBody', json(cancelElicitation.requestBody));
});

test('the error body and the stable error codes', () => {
  const e = json(postToken.responses['400']);
  agrees('ErrorBody', e);
  assert.deepEqual(deref(props(e).error).enum, [...ERROR_CODES]);
});
