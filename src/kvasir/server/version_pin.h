// Pin checks `kvasir serve` runs before it serves: the config's [require] engine range against
// this build, and each [[model]]'s sha256 and quantization pins against the model it loaded
// (server/serve_config.h has the file format, util/sha256.h the digest's definition).
//
// Each check returns normally when the pin holds (or is not set) and otherwise throws
// kvasir::Error with a message that says what was pinned and what was found, in full:
//   require.engine '>=0.2': this is kvasir 0.1.0 (abc1234)
//   model 'large' (models/large.gguf): sha256 pinned '<64 hex digits>' but the file's is
//     '<64 hex digits>'
//   model 'large' (models/large.gguf): quantization pinned 'q8_0' but the model's weights are
//     'q4_k'
// Digests and dtype names compare case-insensitively.
#pragma once

#include <string_view>

#include "kvasir/server/serve_config.h"
#include "kvasir/util/build_info.h"
#include "kvasir/util/version_range.h"

namespace kvasir::server {

// Throws when build.version is outside `range` (or is not a MAJOR.MINOR.PATCH version at all).
void check_engine_requirement(const VersionRange& range, const BuildInfo& build);
// The same for a range as written (parsed first; a malformed one throws naming require.engine).
void check_engine_requirement(std::string_view range, const BuildInfo& build);

// `actual` is sha256_model_path(path): "the file's" digest, or "the folder's" for a folder path
// (told apart by the file system). An empty `actual` throws (the pin was not checked).
void check_sha256_pin(std::string_view model, std::string_view path, std::string_view pinned,
                      std::string_view actual);
// `actual` is dtype_name() of the loaded model's weight type. An empty `actual` throws.
void check_quantization_pin(std::string_view model, std::string_view path, std::string_view pinned,
                            std::string_view actual);

// Both pins of a [[model]] entry; those not set are not checked (their actual value may then be
// empty, e.g. a hash not computed because nothing pins it).
void check_model_pins(const ModelEntry& model, std::string_view actual_sha256,
                      std::string_view actual_quantization);

}  // namespace kvasir::server
