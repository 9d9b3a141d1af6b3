// Reading the small JSON files of a Hugging Face folder (config.json, generation_config.json,
// model.safetensors.index.json) with errors that name the file and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvasir::hf {

// Parses `path`; throws kvasir::Error "<path>: not valid JSON: <parser's message>" or
// "<path>: cannot read: <errno text>". `must_exist` false: nullopt when the file is absent.
std::optional<nlohmann::json> read_json_file(const std::string& path, bool must_exist = true);

// Typed fields of a JSON object `j` read from `file`. Absent or null: `def`, or without one
// "<file>: missing field 'name'". Wrong type or out of range:
// "<file>: field 'name' = <value>: expected <...>".
int64_t json_int(const nlohmann::json& j, const std::string& file, const std::string& name,
                 std::optional<int64_t> def, int64_t lo, int64_t hi);
double json_float(const nlohmann::json& j, const std::string& file, const std::string& name,
                  std::optional<double> def);
bool json_bool(const nlohmann::json& j, const std::string& file, const std::string& name, bool def);
std::string json_string(const nlohmann::json& j, const std::string& file, const std::string& name,
                        std::optional<std::string> def);

}  // namespace kvasir::hf
