#include "kvasir/kernels/backend.h"

#include "kvasir/kernels/cpu/cpu_backend.h"
#include "kvasir/util/error.h"

namespace kvasir {

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
      return "cpu";
  }
  return "unknown";
}

std::unique_ptr<Backend> make_backend(BackendKind kind, ThreadPool& pool) {
  switch (kind) {
    case BackendKind::kCpu:
      return std::make_unique<cpu::CpuBackend>(pool);
  }
  fail("no backend of kind {}", static_cast<int>(kind));
}

}  // namespace kvasir
