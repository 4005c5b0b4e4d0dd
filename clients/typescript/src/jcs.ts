// RFC 8785 (JSON Canonicalization Scheme), the digest input of the requestState binding
// (docs/request-state.md).
//
// Why by hand, and why so short: RFC 8785 defines its number and string forms as exactly
// what ECMAScript's JSON.stringify writes (Number::toString for IEEE-754 doubles, the
// JSON.stringify escapes for strings), so here JSON.stringify does that part. What it does
// not do is the member order: it keeps insertion order, and objects put integer-like keys
// first in numeric order ({"10":1,"9":2} stringifies "9" first, while JCS sorts by UTF-16
// code units and puts "10" first). Array.prototype.sort on strings compares UTF-16 code
// units, which is JCS's order. The rest is refusing what JCS cannot express: unpaired
// surrogates (RFC 8785 §3.2.2.2), non-finite numbers, and values JSON does not have.

/** A value that has no RFC 8785 form. */
export class CanonicalizationError extends Error {
  override readonly name = 'CanonicalizationError';
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function text(s: string): string {
  if (LONE_SURROGATE.test(s)) {
    throw new CanonicalizationError('a string with an unpaired surrogate has no canonical form');
  }
  return JSON.stringify(s);
}

function canonical(v: unknown): string {
  if (v === null) return 'null';
  switch (typeof v) {
    case 'boolean':
      return v ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(v)) throw new CanonicalizationError('a non-finite number has no JSON form');
      return JSON.stringify(v); // -0 is written 0, 1e21 as 1e+21, as RFC 8785 wants
    case 'string':
      return text(v);
    case 'object': {
      if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o).sort();
      return `{${keys.map((k) => `${text(k)}:${canonical(o[k])}`).join(',')}}`;
    }
    default:
      throw new CanonicalizationError(`a ${typeof v} is not JSON`);
  }
}

/**
 * The RFC 8785 text of tool-call arguments as parsed from JSON. Absent arguments
 * (`null` or `undefined`) are `{}`, as in the other mcp-connect libraries.
 */
export function canonicalJson(args: unknown): string {
  return args === null || args === undefined ? '{}' : canonical(args);
}
