// The package's description of the wire (WIRE, QUERY, the enums in src/api.ts, which the
// compiler keeps in step with the TypeScript types) against the contract, openapi.json:
// field names, required-ness, the `status` variants and the ErrorCode values. The shapes
// are found from the operations (postToken, getElicitation, cancelElicitation), so a
// renamed schema is followed and a changed one fails here.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { ELICITATION_STATUSES, ERROR_CODES, QUERY, TOKEN_STATUSES, WIRE } from '../dist/index.js';

const doc = JSON.parse(readFileSync(new URL('../../../openapi.json', import.meta.url), 'utf8'));
const deref = (s) => (s?.$ref ? deref(doc.components.schemas[s.$ref.split('/').pop()]) : s);
/** The one non-null member of `oneOf: [null, X]`, or the schema itself. */
const nonNull = (s) => deref(s.oneOf ? s.oneOf.find((m) => m.type !== 'null') : s);
const json = (o) => nonNull(o.content['application/json'].schema);
const op = (path, method) => doc.paths[path][method];

const postToken = op('/v1/token', 'post');
const getElicitation = op('/v1/elicitations/{id}', 'get');
const cancelElicitation = op('/v1/elicitations/{id}/cancel', 'post');
const answer = json(postToken.responses['200']);
const variant = (status) => {
  const v = answer.oneOf.find((m) => m.allOf[1].properties.status.enum.includes(status));
  return deref(v.allOf[0]);
};

function agrees(name, schema) {
  const fields = WIRE[name];
  assert.deepEqual(Object.keys(schema.properties).sort(), Object.keys(fields).sort(), `${name}: field names`);
  const required = Object.entries(fields).filter(([, r]) => r).map(([k]) => k).sort();
  assert.deepEqual([...(schema.required ?? [])].sort(), required, `${name}: required fields`);
}

test('the postToken request body', () => agrees('TokenBody', json(postToken.requestBody)));

test('the postToken answer: the status variants and each variant', () => {
  assert.deepEqual(answer.oneOf.map((m) => m.allOf[1].properties.status.enum[0]), [...TOKEN_STATUSES]);
  agrees('Connected', variant('connected'));
  agrees('Account', nonNull(variant('connected').properties.account));
  agrees('ConnectRequired', variant('connect_required'));
  agrees('ElicitationLink', deref(variant('connect_required').properties.elicitation));
  agrees('McpElicitation', deref(variant('connect_required').properties.mcp));
  agrees('Declined', variant('declined'));
});

test('getElicitation: the answer, its status values and the query parameters', () => {
  const e = json(getElicitation.responses['200']);
  agrees('Elicitation', e);
  assert.deepEqual(deref(e.properties.status).enum, [...ELICITATION_STATUSES]);
  const query = getElicitation.parameters.filter((p) => p.in === 'query').map((p) => p.name);
  assert.deepEqual(query, [...QUERY.getElicitation]);
});

test('cancelElicitation: the answer', () => {
  const c = json(cancelElicitation.responses['200']);
  agrees('Cancelled', c);
  assert.deepEqual(deref(c.properties.status).enum, [...ELICITATION_STATUSES]);
});

test('cancelElicitation: the request body', () => {
  agrees('CancelBody', json(cancelElicitation.requestBody));
});

test('the error body and the stable error codes', () => {
  const e = json(postToken.responses['400']);
  agrees('ErrorBody', e);
  assert.deepEqual(deref(e.properties.error).enum, [...ERROR_CODES]);
});
