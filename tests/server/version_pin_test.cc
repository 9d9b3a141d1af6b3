// server/version_pin.h: the engine range against a build's version, and a model's sha256 and
// quantization pins, each failing with both sides of the mismatch in full.
#include "kvasir/server/version_pin.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kvasir/util/error.h"
#include "test_util/files.h"

namespace kvasir::server {
namespace {

const std::string kA = std::string(64, 'a');
const std::string kB = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

BuildInfo build(std::string version) {
  return BuildInfo{std::move(version), "abc1234", "Release", "GCC 12.2.0", "-O3"};
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VersionPin, EngineRequirement) {
  EXPECT_NO_THROW(check_engine_requirement(VersionRange::parse(">=0.1, <0.2"), build("0.1.0")));
  EXPECT_NO_THROW(check_engine_requirement(">=0.1, <0.2", build("0.1.9")));
  EXPECT_EQ(error_of([] { check_engine_requirement(">=0.2", build("0.1.0")); }),
            "require.engine '>=0.2': this is kvasir 0.1.0 (abc1234)");
  EXPECT_EQ(error_of([] { check_engine_requirement("^0.1", build("0.2.0")); }),
            "require.engine '^0.1': this is kvasir 0.2.0 (abc1234)");
  EXPECT_EQ(error_of([] { check_engine_requirement(">=0.1", build("unknown")); }),
            "require.engine '>=0.1': this is kvasir unknown (abc1234), whose version cannot be "
            "compared");
  EXPECT_EQ(error_of([] { check_engine_requirement(">=0.1.x.y", build("0.1.0")); }),
            "require.engine: cannot parse '>=0.1.x.y': clause '>=0.1.x.y': more than 3 version "
            "parts (MAJOR.MINOR.PATCH)");
  // This binary's own facts satisfy a range around its own version.
  const BuildInfo& self = build_info();
  EXPECT_NO_THROW(check_engine_requirement("=" + self.version, self));
}

TEST(VersionPin, Sha256MismatchNamesBothHashes) {
  EXPECT_NO_THROW(check_sha256_pin("large", "m/large.gguf", kB, kB));
  std::string upper = kB;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_NO_THROW(check_sha256_pin("large", "m/large.gguf", upper, kB));  // case-insensitive
  EXPECT_EQ(
      error_of([] { check_sha256_pin("large", "m/large.gguf", kA, kB); }),
      "model 'large' (m/large.gguf): sha256 pinned '" + kA + "' but the file's is '" + kB + "'");
  // A folder's digest is the folder's.
  const std::string dir = test_util::temp_dir("kvasir-version-pin");
  EXPECT_EQ(
      error_of([&] { check_sha256_pin("hf", dir, kA, kB); }),
      "model 'hf' (" + dir + "): sha256 pinned '" + kA + "' but the folder's is '" + kB + "'");
  EXPECT_EQ(error_of([] { check_sha256_pin("large", "m/large.gguf", kA, ""); }),
            "model 'large' (m/large.gguf): sha256 pinned '" + kA +
                "' but the model's digest was not computed");
}

TEST(VersionPin, QuantizationMismatch) {
  EXPECT_NO_THROW(check_quantization_pin("m", "m.gguf", "q8_0", "q8_0"));
  EXPECT_NO_THROW(check_quantization_pin("m", "m.gguf", "Q8_0", "q8_0"));
  EXPECT_EQ(error_of([] { check_quantization_pin("large", "l.gguf", "q8_0", "q4_k"); }),
            "model 'large' (l.gguf): quantization pinned 'q8_0' but the model's weights are "
            "'q4_k'");
}

TEST(VersionPin, ModelEntryChecksOnlyItsPins) {
  ModelEntry m;
  m.name = "large";
  m.path = "l.gguf";
  EXPECT_NO_THROW(check_model_pins(m, "", ""));  // nothing pinned: nothing needed
  m.sha256 = kA;
  EXPECT_NO_THROW(check_model_pins(m, kA, ""));
  EXPECT_EQ(error_of([&] { check_model_pins(m, kB, ""); }),
            "model 'large' (l.gguf): sha256 pinned '" + kA + "' but the file's is '" + kB + "'");
  m.quantization = "q8_0";
  EXPECT_NO_THROW(check_model_pins(m, kA, "q8_0"));
  EXPECT_EQ(error_of([&] { check_model_pins(m, kA, "f16"); }),
            "model 'large' (l.gguf): quantization pinned 'q8_0' but the model's weights are 'f16'");
  EXPECT_THROW(check_model_pins(m, kA, ""), Error);  // pinned but not known: never skipped
}

TEST(VersionPin, PinsFromAParsedConfig) {
  const ServeConfigFile c = parse_serve_config(
      "[require]\nengine = \">=0.2\"\n[[model]]\nname = \"large\"\npath = \"l.gguf\"\n"
      "sha256 = \"" +
          kA + "\"\n",
      "kvasir.toml", "/srv");
  ASSERT_TRUE(c.require_engine);
  EXPECT_EQ(error_of([&] { check_engine_requirement(*c.require_engine, build("0.1.0")); }),
            "require.engine '>=0.2': this is kvasir 0.1.0 (abc1234)");
  EXPECT_EQ(
      error_of([&] { check_model_pins(c.models[0], kB, "q8_0"); }),
      "model 'large' (/srv/l.gguf): sha256 pinned '" + kA + "' but the file's is '" + kB + "'");
}

}  // namespace
}  // namespace kvasir::server
