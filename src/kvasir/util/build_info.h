// Build facts: what `kvasir --version` prints and what the server can report on /health.
//
// Contract: every field is filled (never empty). `commit` is the short git commit of the source
// tree when CMake configured the build ("unknown" outside a git checkout or without git); CMake
// re-runs itself when HEAD moves (commit, checkout, branch switch), so an incremental build
// after a commit reports the new commit. `build_type` is the CMake configuration ("Release",
// "Debug", ...; "none" when none was chosen). `compiler` is the compiler that built this file,
// which is the one that built the whole project (e.g. "GCC 12.2.0", "Clang 16.0.6").
// `build_flags` is the C++ flags the build used, as CMake configured them: CMAKE_CXX_FLAGS, the
// build type's CMAKE_CXX_FLAGS_<TYPE> and the project's compile options, spaces collapsed (e.g.
// "-O3 -DNDEBUG -g -Wall -Wextra -Werror -ffp-contract=off"), followed by
// "; sanitizers: address,undefined" in a KVASIR_SANITIZE build; "none" when there are none.
// The kernel ISA is not a build fact: it is chosen at run time (the backend's description()).
#pragma once

#include <string>

namespace kvasir {

struct BuildInfo {
  std::string version;      // the project version, e.g. "0.1.0"
  std::string commit;       // e.g. "bead158"; "unknown" outside git
  std::string build_type;   // e.g. "Release"; "none" when CMAKE_BUILD_TYPE was empty
  std::string compiler;     // e.g. "GCC 12.2.0"
  std::string build_flags;  // e.g. "-O3 -DNDEBUG -g -Wall ..."; "none" when empty
};

// The facts of this binary (computed once; thread-safe).
const BuildInfo& build_info();

}  // namespace kvasir
