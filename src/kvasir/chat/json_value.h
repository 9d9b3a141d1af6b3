// Conversion between JSON and template values. from_json maps JSON to the values Python's
// json.loads would produce (object -> dict, array -> list, integer -> int, real -> float).
// to_json is Python's json.dumps as Hugging Face's `tojson` filter calls it (ensure_ascii=False by
// default; indent, separators and sort_keys as in json.dumps), so output matches byte for byte.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvasir/chat/value.h"

namespace kvasir::chat {

// Keeps object key order (ordered_json), as Python dicts do.
Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;                         // nullopt: single line
  std::optional<std::string> item_separator, key_separator;  // nullopt: json.dumps defaults
  bool sort_keys = false;
};

// Throws TypeError ("Object of type X is not JSON serializable") like json.dumps.
std::string to_json(const Value& v, const JsonDumpOptions& options);

}  // namespace kvasir::chat
