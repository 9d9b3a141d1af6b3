// Tool calls: the families of chat templates that render `tools`, how each family's model writes
// a call, parsing model output into OpenAI `tool_calls` (whole, or incrementally for streaming),
// and the grammar that forces a call (tool_choice "required" or a named function).
//
// Families (chosen from the markers in the chat template's source, as llama.cpp's
// common_chat_templates_init does; first match wins, in this order):
//   kDeepSeek   `<｜tool▁calls▁begin｜>` in the template. A call:
//                 <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//                 <｜tool▁call▁end｜>
//               (no break before the end marker), one or more of them between
//               `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`; DeepSeek V3 / R1 and
//               its distills. The V3.1 form is parsed too:
//                 <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
//   kGranite    `<|tool_call|>`: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]` (Granite
//               3.x; Granite 4.0's template uses `<tool_call>` and is kHermes)
//   kMistralV11 `[TOOL_CALLS]` and `[ARGS]`: `[TOOL_CALLS]NAME[ARGS]{...}` once per call
//               (Mistral Small 3.2, Magistral, Devstral; `[CALL_ID]ID` before `[ARGS]` accepted)
//   kMistral    `[TOOL_CALLS]` alone: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`
//               (Mistral v3, Nemo). Both Mistral families parse both forms.
//   kHermes     `<tool_call>`: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`
//               once per call (Hermes 2/3, Qwen 2.5/3, QwQ, Granite 4.0)
//   kLlama3     `<|start_header_id|>ipython<|end_header_id|>` or `<|python_tag|>`: a JSON object
//               {"name": ..., "parameters": {...}} ("arguments" also accepted, and "type":
//               "function"), optionally after `<|python_tag|>`; Llama 3.1 / 3.2 / 3.3
//   kNone       none of these (e.g. LFM2.5's template lists tools but shows no call syntax and
//               does not render assistant tool_calls back): tool requests are refused.
//
// Parsing (parse_tool_calls and ToolCallStreamParser give the same result, by construction: the
// whole parse is the streaming parser run over the whole text at once):
//  - The text is scanned left to right for a call's start marker. A call is the family's complete
//    syntax: marker, a JSON object with a non-empty string "name" and an "arguments" object (or
//    "parameters"; a JSON string holding an object is accepted; a missing one is {} except for
//    kLlama3, which has no marker and requires it), and the closing marker where the family has
//    one (kHermes: a missing `</tool_call>` at the very end of the text is tolerated). Anything
//    else — a marker followed by text that is not such a call — stays in `content`, verbatim.
//  - kMistral/kGranite write several calls in one JSON array: one bad element leaves the whole
//    array as content.
//  - kLlama3 has no marker: a JSON object is a call only where it is the first non-blank text of
//    the output, or follows `<|python_tag|>`, or follows a previous call (after blanks and an
//    optional `;`). It must have only the keys name, parameters/arguments and type.
//  - White space (space, tab, CR, LF) next to a call is dropped from content: text before a call
//    loses its trailing blanks, text after one its leading blanks. Text without calls is
//    returned unchanged.
//  - ids: "call_" + 24 random [A-Za-z0-9], unique within the parser; the Mistral families use
//    9 random [A-Za-z0-9] instead (their templates refuse any other id when the call is sent
//    back), or the model's own id when it wrote a 9-character alphanumeric one not yet used.
//  - arguments: the arguments object re-serialized as compact JSON (keys in the model's order).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace kvasir::server {

enum class ToolFamily { kNone, kHermes, kLlama3, kMistral, kMistralV11, kGranite, kDeepSeek };
// "none", "hermes", "llama3", "mistral", "mistral-v11", "granite", "deepseek"
const char* tool_family_name(ToolFamily f);
// The family of a name tool_family_name() gives (the server's --tool-call-parser), or nullopt.
std::optional<ToolFamily> tool_family_from_name(std::string_view name);

// The family a chat template's source text belongs to (kNone when it has no tool support).
ToolFamily detect_tool_family(std::string_view template_source);

struct ToolCall {
  std::string id;  // "call_" + 24 alphanumerics (Mistral: 9 alphanumerics), unique per response
  std::string name;
  std::string arguments;  // compact JSON text of the arguments object, as OpenAI returns it
};

struct ParsedOutput {
  std::string content;          // the text outside tool calls (markers of calls removed)
  std::vector<ToolCall> calls;  // in order
};

// Parses a finished generation. Text that only looks like the start of a call but does not parse
// as one stays in `content` (never lost).
ParsedOutput parse_tool_calls(ToolFamily family, std::string_view text);

// Incremental form for streaming: push() text deltas of any size as they are generated (they may
// split markers and UTF-8 characters anywhere), receive what can already be sent; finish() at the
// end of the generation. The concatenated content of all events equals parse_tool_calls(all the
// text).content, and the calls they carry equal its calls (ids aside).
//
// Held back until decided: a suffix that could begin a call marker; from a marker on, everything
// until the call completes or fails (kLlama3: a `{` that is the output's first non-blank
// character, until a member shows it is not a call — a key other than a call's, a name that is
// not a string — or the object ends); trailing white space
// (it is dropped if a call follows); after a call, leading white space; an incomplete UTF-8
// character at the end of the text.
//
// A call is sent whole when its syntax is complete (its closing marker, or kLlama3's closing
// brace): a first delta with index, id and name (arguments ""), then one delta with all of its
// arguments. Arguments are not streamed piece by piece: until the call completes, the text may
// still turn out not to be a call, and then it must come out as content.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;    // first delta of a call only (type "function")
  std::optional<std::string> name;  // first delta of a call only
  std::string arguments;            // fragment
};
struct StreamEvents {
  std::string content;                    // content to send now
  std::vector<ToolCallDelta> tool_calls;  // tool call deltas to send now, in order
};
class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolFamily family);
  StreamEvents push(std::string_view text);
  StreamEvents finish();  // end of generation: decide held text (content if no call formed)
  int calls() const { return calls_; }  // calls sent so far

 private:
  friend ParsedOutput parse_tool_calls(ToolFamily family, std::string_view text);
  // Decides as much of text_ as it can (all of it when at_end), appending decided content and
  // completed calls.
  void advance(bool at_end, std::string& content, std::vector<ToolCall>& calls);
  enum class Close { kOpen, kByCall, kByEnd };
  void emit_content(size_t upto, Close close, std::string& out);  // kOpen: more text may come
  size_t find_candidate(bool at_end) const;
  std::string new_id(const std::string& model_id);

  ToolFamily family_;
  std::string text_;         // everything pushed so far
  size_t pos_ = 0;           // no call can start before this position any more
  size_t seg_start_ = 0;     // start of the current content segment (after the last call)
  size_t emitted_ = 0;       // content of the current segment sent up to here
  size_t scanned_ = 0;       // [emitted_, scanned_) is white space held back
  bool after_call_ = false;  // the current segment follows a call
  bool finished_ = false;
  int calls_ = 0;
  std::unordered_set<std::string> ids_;
};

// A GBNF grammar that makes the model write one or more calls (tool_choice "required";
// parallel = more than one allowed) or exactly one call of `only_function` (a named
// tool_choice), in the family's syntax exactly as its template renders calls, with each
// function's arguments constrained by its JSON schema (grammar/json_schema.h; "strict": true on a
// function applies the converter's strict mode; no "parameters" means the empty object). kLlama3
// always gets one call (its template refuses several). The grammar starts at the first generated
// character (no content or reasoning before the call).
// `tools` is the request's OpenAI tools array, validated here: kvasir::Error naming the index and
// field ("tools[2].function.name: ...") for a wrong shape, a name outside [a-zA-Z0-9_-]{1,64}, a
// duplicate name, parameters that are not an object schema, or a schema keyword the converter
// cannot express; and for an `only_function` not in `tools`, or family kNone.
std::string tool_call_grammar(ToolFamily family, const nlohmann::ordered_json& tools,
                              const std::optional<std::string>& only_function, bool parallel);

}  // namespace kvasir::server
