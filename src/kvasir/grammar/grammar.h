// GBNF grammars (llama.cpp's dialect, grammars/README.md of llama.cpp): parsing into a compiled,
// immutable Grammar, and matching text against it code point by code point.
//
// The dialect: `name ::= alternatives` rules (names [a-zA-Z0-9-]+; a rule may continue on
// following lines while it is inside parentheses or the next line starts with `|`), sequences of
// terms separated by white space, `|` alternatives, string literals "..." and character classes
// [a-z0-9_] / [^"\\] with the escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH \UHHHHHHHH, `.` (any code
// point), parentheses, postfix `*` `+` `?` and `{m}` `{m,}` `{m,n}` `{,n}`, rule references, `#`
// comments to the end of the line. The start rule is `root` (or the one named by the caller).
// Every referenced rule must be defined; left recursion is refused (it would never terminate),
// as llama.cpp refuses it. Errors are kvasir::Error "grammar: line L, column C: what was expected".
//
// Matching semantics (llama.cpp's llama_grammar_accept): the state is the set of parse stacks
// reachable after the text so far; a code point is accepted when some stack's next element
// admits it; the text is complete when some stack is empty (root fully matched). Repetitions are
// expanded into helper rules as llama.cpp does (S{m,n}: m copies of S, then n - m nested
// optional helpers; S* and S+: a right-recursive helper), so S* of an S that can match the empty
// string is left recursion and refused, as in llama.cpp. Text is matched as UTF-8 decoded into
// code points; ill-formed UTF-8 (overlong forms, surrogates, bytes F5..FF) matches nothing.
//
// Differences from llama.cpp, all refusals of what llama.cpp would silently mishandle: a rule
// defined twice, an empty character class `[]`/`[^]`, and a start rule that can never finish
// (every alternative recurses forever) are errors; `{,n}` and `\-` are accepted; a rule may
// continue on a following line that starts with `|`. Helper rules are named `NAME-N` (llama.cpp:
// `NAME_N`) so that to_gbnf()'s output parses back to the same grammar.
//
// Limits (server input): see kGbnf* below. Parsing beyond them is an error naming the limit.
// Matching keeps at most kGbnfMaxStacks parse stacks (chosen over making it an error, since the
// decode step must not fail): when an ambiguous grammar reaches more after some code point, the
// set is pruned deterministically to the kGbnfMaxStacks shallowest stacks (ties broken by a hash
// of their contents, never by anything run-dependent), so a pruned matcher may reject text the
// grammar admits but never admits text it rejects, and the same text always gives the same
// state. Unambiguous grammars (JSON, JSON-schema output) keep a handful of stacks.
//
// Cost: parse_gbnf is linear in the compiled size (plus O(R log R) over rules for the shortest
// derivations). grammar_accepts builds a fresh matcher: O(text) steps of O(stacks) each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::grammar {

struct Grammar;  // compiled rules; defined in grammar_impl.h (grammar/ internal)

inline constexpr size_t kGbnfMaxTextBytes = size_t{1} << 20;  // grammar text
inline constexpr size_t kGbnfMaxElements = size_t{1} << 20;   // compiled elements (8 bytes each)
inline constexpr size_t kGbnfMaxRules = size_t{1} << 17;      // rules, helper rules included
inline constexpr uint32_t kGbnfMaxRepetition = 10000;         // m and n of {m,n}
inline constexpr int kGbnfMaxNesting = 256;                   // parentheses inside each other
inline constexpr size_t kGbnfMaxStacks = 1024;                // parse stacks kept while matching

// Parses `text`; throws kvasir::Error (line, column, what was expected) on a syntax error, an
// undefined rule, a missing start rule, left recursion, or a grammar larger than the limits
// (bounded rule count, element count, repetition counts) that protect the server.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// A GBNF string literal ("...") matching exactly the bytes of `s` (quote, backslash and control
// bytes escaped), for code that writes grammars.
std::string gbnf_literal(std::string_view s);

// The grammar's rules printed back in GBNF (normalized: one rule a line), for errors and tests.
std::string to_gbnf(const Grammar& g);

// Whether the whole of `utf8` is a complete sentence of the grammar (invalid UTF-8: false).
// For tests and for checking a model's finished output; not used on the decode path.
bool grammar_accepts(const Grammar& g, std::string_view utf8);

}  // namespace kvasir::grammar
