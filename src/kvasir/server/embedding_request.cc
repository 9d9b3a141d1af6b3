#include "kvasir/server/embedding_request.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "kvasir/server/api_error.h"

namespace kvasir::server {

namespace {

constexpr std::string_view kFields[] = {"input", "model", "encoding_format", "dimensions", "user"};

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError::bad_request(message, param);
}

[[noreturn]] void wrong_type(const std::string& field, const std::string& param,
                             const char* expected, const Json& v) {
  bad(param, fmt::format("'{}' must be {}, got {}", field, expected, json_type_name(v)));
}

// A token id: a JSON integer in [0, 2^31-1] (a float with an integral value too, as JSON has one
// number type).
int32_t token_id(const Json& v, const std::string& field) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  int64_t id = -1;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    id = u > static_cast<uint64_t>(kMax) ? kMax + 1 : static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    id = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d)) && d >= -1 && d <= kMax + 1.0)
      id = static_cast<int64_t>(d);
    else
      bad("input", fmt::format("'{}' must be an integer token id, got {}", field, d));
  } else {
    wrong_type(field, "input", "a token id (an integer)", v);
  }
  if (id < 0 || id > kMax)
    bad("input", fmt::format("'{}' must be a token id in [0, {}], got {}", field, kMax, v.dump()));
  return static_cast<int32_t>(id);
}

std::vector<int32_t> token_ids(const Json& a, const std::string& field) {
  if (a.empty()) bad("input", fmt::format("'{}' must not be empty", field));
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    ids.push_back(token_id(a[i], fmt::format("{}[{}]", field, i)));
  return ids;
}

std::vector<PromptInput> parse_input(const Json& body, bool& batch) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) bad("input", "'input' is required");
  const Json& in = *it;
  std::vector<PromptInput> out;
  if (in.is_string()) {
    if (in.get_ref<const std::string&>().empty()) bad("input", "'input' must not be empty");
    out.push_back({false, in.get<std::string>(), {}});
    return out;
  }
  if (!in.is_array())
    wrong_type("input", "input",
               "a string, an array of strings, an array of token ids or an array of arrays of "
               "token ids",
               in);
  if (in.empty()) bad("input", "'input' must not be empty");
  if (in[0].is_number()) {
    out.push_back({true, {}, token_ids(in, "input")});
    return out;
  }
  batch = true;
  if (in.size() > kMaxEmbeddingInputs)
    bad("input", fmt::format("'input' has {} entries, more than the {} allowed", in.size(),
                             kMaxEmbeddingInputs));
  for (size_t i = 0; i < in.size(); ++i) {
    const Json& e = in[i];
    const std::string f = fmt::format("input[{}]", i);
    if (e.is_string()) {
      if (e.get_ref<const std::string&>().empty())
        bad("input", fmt::format("'{}' must not be empty", f));
      out.push_back({false, e.get<std::string>(), {}});
    } else if (e.is_array()) {
      out.push_back({true, {}, token_ids(e, f)});
    } else {
      wrong_type(f, "input", "a string or an array of token ids", e);
    }
  }
  return out;
}

}  // namespace

EmbeddingRequest parse_embedding_request(const Json& body) {
  for (const auto& [k, v] : body.items()) {
    bool known = false;
    for (std::string_view f : kFields) known = known || k == f;
    if (!known)
      bad(k, fmt::format("unsupported field '{}' (/v1/embeddings takes input, model, "
                         "encoding_format, dimensions and user)",
                         k));
  }
  EmbeddingRequest r;
  r.inputs = parse_input(body, r.batch);
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) wrong_type("model", "model", "a string", *it);
    r.model = it->get<std::string>();
  }
  if (auto it = body.find("encoding_format"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) wrong_type("encoding_format", "encoding_format", "a string", *it);
    const std::string& f = it->get_ref<const std::string&>();
    if (f == "base64")
      r.base64 = true;
    else if (f != "float")
      bad("encoding_format",
          fmt::format("'encoding_format' must be \"float\" or \"base64\", got \"{}\"", f));
  }
  if (auto it = body.find("dimensions"); it != body.end() && !it->is_null()) {
    const Json& d = *it;
    const bool integral = d.is_number_integer() ||
                          (d.is_number_float() && d.get<double>() == std::floor(d.get<double>()));
    if (!d.is_number() || !integral) wrong_type("dimensions", "dimensions", "an integer", d);
    const double v = d.get<double>();
    if (v < 1 || v > std::numeric_limits<int32_t>::max())
      bad("dimensions",
          fmt::format("'dimensions' must be between 1 and the model's embedding size, got {}",
                      d.dump()));
    r.dimensions = static_cast<int>(v);
  }
  if (auto it = body.find("user"); it != body.end() && !it->is_null() && !it->is_string())
    wrong_type("user", "user", "a string", *it);
  return r;
}

}  // namespace kvasir::server
