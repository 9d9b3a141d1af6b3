#include "kvasir/server/version_pin.h"

#include <filesystem>
#include <string>

#include "kvasir/util/error.h"

namespace kvasir::server {

namespace {

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

}  // namespace

void check_engine_requirement(const VersionRange& range, const BuildInfo& build) {
  Version v;
  try {
    v = parse_version(build.version, "this build");
  } catch (const Error&) {
    fail("require.engine '{}': this is kvasir {} ({}), whose version cannot be compared",
         range.text(), build.version, build.commit);
  }
  if (!range.contains(v))
    fail("require.engine '{}': this is kvasir {} ({})", range.text(), build.version, build.commit);
}

void check_engine_requirement(std::string_view range, const BuildInfo& build) {
  check_engine_requirement(VersionRange::parse(range, "require.engine"), build);
}

void check_sha256_pin(std::string_view model, std::string_view path, std::string_view pinned,
                      std::string_view actual) {
  if (actual.empty())
    fail("model '{}' ({}): sha256 pinned '{}' but the model's digest was not computed", model, path,
         pinned);
  if (equal_ignoring_case(pinned, actual)) return;
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(std::string(path), ec);
  fail("model '{}' ({}): sha256 pinned '{}' but the {}'s is '{}'", model, path, pinned,
       folder ? "folder" : "file", actual);
}

void check_quantization_pin(std::string_view model, std::string_view path, std::string_view pinned,
                            std::string_view actual) {
  if (actual.empty())
    fail("model '{}' ({}): quantization pinned '{}' but the model's weight type is not known",
         model, path, pinned);
  if (!equal_ignoring_case(pinned, actual))
    fail("model '{}' ({}): quantization pinned '{}' but the model's weights are '{}'", model, path,
         pinned, actual);
}

void check_model_pins(const ModelEntry& model, std::string_view actual_sha256,
                      std::string_view actual_quantization) {
  if (model.sha256) check_sha256_pin(model.name, model.path, *model.sha256, actual_sha256);
  if (model.quantization)
    check_quantization_pin(model.name, model.path, *model.quantization, actual_quantization);
}

}  // namespace kvasir::server
