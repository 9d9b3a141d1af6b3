#include "kvasir/hf/json_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvasir/util/error.h"

namespace kvasir::hf {

namespace {

std::string shown(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const nlohmann::json* field(const nlohmann::json& j, const std::string& file,
                            const std::string& name) {
  if (!j.is_object()) fail("{}: expected a JSON object at the top level", file);
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

std::optional<nlohmann::json> read_json_file(const std::string& path, bool must_exist) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!must_exist && errno == ENOENT) return std::nullopt;
    fail("{}: cannot read: {}", path, std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

int64_t json_int(const nlohmann::json& j, const std::string& file, const std::string& name,
                 std::optional<int64_t> def, int64_t lo, int64_t hi) {
  const nlohmann::json* v = field(j, file, name);
  if (!v) {
    if (def) return *def;
    fail("{}: missing field '{}'", file, name);
  }
  bool ok = false;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    ok = hi >= 0 && u <= static_cast<uint64_t>(hi);
    x = ok ? static_cast<int64_t>(u) : 0;
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
    ok = true;
  }
  if (!ok || x < lo || x > hi)
    fail("{}: field '{}' = {}: expected an integer in {} .. {}", file, name, shown(*v), lo, hi);
  return x;
}

double json_float(const nlohmann::json& j, const std::string& file, const std::string& name,
                  std::optional<double> def) {
  const nlohmann::json* v = field(j, file, name);
  if (!v) {
    if (def) return *def;
    fail("{}: missing field '{}'", file, name);
  }
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    fail("{}: field '{}' = {}: expected a finite number", file, name, shown(*v));
  return v->get<double>();
}

bool json_bool(const nlohmann::json& j, const std::string& file, const std::string& name,
               bool def) {
  const nlohmann::json* v = field(j, file, name);
  if (!v) return def;
  if (!v->is_boolean()) fail("{}: field '{}' = {}: expected true or false", file, name, shown(*v));
  return v->get<bool>();
}

std::string json_string(const nlohmann::json& j, const std::string& file, const std::string& name,
                        std::optional<std::string> def) {
  const nlohmann::json* v = field(j, file, name);
  if (!v) {
    if (def) return *def;
    fail("{}: missing field '{}'", file, name);
  }
  if (!v->is_string()) fail("{}: field '{}' = {}: expected a string", file, name, shown(*v));
  return v->get<std::string>();
}

}  // namespace kvasir::hf
