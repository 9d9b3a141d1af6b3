// JSON Schema → GBNF, for OpenAI's response_format {"type": "json_schema"} and tool parameters,
// and the grammar of `json_object` mode (any JSON object).
//
// Follows llama.cpp's json-schema-to-grammar (common/json-schema-to-grammar.cpp) in what the
// generated grammar admits: llama.cpp's primitives (bounded white space
// `space ::= | " " | "\n"{1,2} [ \t]{0,20}` after every token, no white space before the value;
// integers of at most 16 digits; strings with llama.cpp's `char` escapes), properties in schema
// order (required ones always present, optional ones in order, each at most once, additional
// properties after the declared ones), additionalProperties (true/false/schema; when absent,
// false under options.strict, true otherwise), items/prefixItems (and draft 7 tuple `items` with
// additionalItems), minItems/maxItems, enum/const (any JSON value, written as
// nlohmann::json::dump writes it, white space allowed between its tokens), anyOf/oneOf (as
// alternatives: oneOf's exclusivity is not enforced), allOf and $ref with sibling keywords
// (merged into one schema), $ref to local JSON pointers ("#", "#/$defs/x", "#/definitions/x",
// any "#/..."; recursion becomes rule recursion), type arrays, OpenAPI's nullable, string
// minLength/maxLength, pattern (an ECMA-262 subset: literals, escapes, classes, `.`, groups,
// alternation, ? * + {m,n}; the whole value must match, ^ and $ implied as in llama.cpp),
// formats date (Gregorian, leap years exact), time, date-time, uuid (and int32/int64 on integers,
// float/double on numbers); integer minimum/maximum/exclusive* (any bounds, as exact digit
// rules), number bounds that are whole numbers (such numbers are written without an exponent).
// Restricting more than the schema (never less) is deliberate in those places: fixed property
// order, one spelling per const value, no "\/" escape, anchored patterns, no exponent in bounded
// numbers.
// Keywords that constrain the value and are not implemented are refused by name, never ignored:
// kvasir::Error "json_schema: unsupported keyword 'X' at /path/to/it" (multipleOf, not,
// if/then/else, dependent*, patternProperties, propertyNames, min/maxProperties, contains,
// unevaluated*, uniqueItems: true, $dynamicRef, remote or anchor $ref, other formats, pattern
// features outside the subset, pattern or format combined with length bounds). Annotation-only
// keywords (title, description, examples, $schema, $id, $comment, default, deprecated, readOnly,
// writeOnly, ...) and unknown keywords (JSON Schema treats them as annotations) are ignored.
// Malformed schemas are kvasir::Error "json_schema: ..." with the JSON pointer. Nesting depth (64),
// repetition counts (4096) and the grammar's size (1 MiB) are bounded.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvasir::grammar {

struct JsonSchemaOptions {
  // OpenAI's strict mode: an object schema without "additionalProperties" admits no property
  // beyond its "properties" (and {"type": "object"} alone admits only {}). Otherwise such an
  // object admits any further properties, as JSON Schema says.
  bool strict = false;
  // Name of the start rule ([a-zA-Z0-9-]+, not a primitive's name).
  std::string root = "root";
};

// The GBNF grammar (start rule first, then the others sorted by name, one rule a line) of JSON
// text whose value validates against `schema` (all such values, in the spellings and orders
// above). Deterministic. Throws kvasir::Error naming the keyword and its JSON pointer for what
// it does not support, or what is wrong and where for a malformed schema.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                const JsonSchemaOptions& options = {});

// The grammar of json_object mode: any JSON object (llama.cpp's `object` primitive; white space
// as in json_schema_to_gbnf: allowed after each token, not before the value).
std::string json_object_gbnf();

}  // namespace kvasir::grammar
