#include "kvasir/kernels/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "kvasir/kernels/cpu/attention.h"
#include "kvasir/kernels/cpu/matmul.h"
#include "kvasir/kernels/cpu/ops.h"
#include "kvasir/util/error.h"

namespace kvasir::cpu {

namespace {

class HostBuffer final : public DeviceBuffer {
 public:
  HostBuffer(void* p, size_t bytes) : DeviceBuffer(p, bytes) {}
  ~HostBuffer() override { std::free(data()); }
};

// Host memory someone else owns (a GGUF mapping): read in place.
class HostView final : public DeviceBuffer {
 public:
  HostView(const void* p, size_t bytes) : DeviceBuffer(const_cast<void*>(p), bytes) {}
};

// The matmul inputs, prepared once per input (quantized or regrouped in token tiles).
struct CpuScratch final : BackendScratch {
  Activations act;
};

// Q8_0 and Q4_0 read Q8_0-quantized activations, Q4_K and Q6_K Q8_K ones; the float types read
// the floats.
bool same_activation_format(DType a, DType b) {
  return activation_format(a) == activation_format(b);
}

const PackedMatrix& packed(const DeviceMatrix& w) {
  if (w.backend() != BackendKind::kCpu)
    fail("cpu backend: a {} weight matrix was given to the CPU backend",
         backend_kind_name(w.backend()));
  return static_cast<const PackedMatrix&>(w);
}

}  // namespace

std::string CpuBackend::description() const {
  return fmt::format("cpu ({}, {} threads)", simd_target_name(), pool_.size());
}

std::unique_ptr<DeviceBuffer> CpuBackend::alloc(size_t bytes, const char* what) {
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) fail("cannot allocate {} bytes for {}", bytes, what);
  std::memset(p, 0, rounded);
  return std::make_unique<HostBuffer>(p, bytes);
}

std::unique_ptr<DeviceMatrix> CpuBackend::load_matrix(const MatrixView& w) {
  return std::make_unique<PackedMatrix>(w, pool_);
}

std::unique_ptr<DeviceBuffer> CpuBackend::load_vector(const float* host, int64_t n) {
  return std::make_unique<HostView>(host, static_cast<size_t>(n) * sizeof(float));
}

size_t CpuBackend::matrix_bytes(DType type, int64_t rows, int64_t cols) const {
  return packed_bytes(type, rows, cols);
}

std::unique_ptr<BackendScratch> CpuBackend::new_scratch() {
  return std::make_unique<CpuScratch>();
}

void CpuBackend::copy_to_host(void* host, const void* src, size_t bytes) {
  if (host != src) std::memcpy(host, src, bytes);
}

void CpuBackend::embed(const MatrixView& table, std::span<const int32_t> tokens, float* out) {
  for (size_t t = 0; t < tokens.size(); ++t)
    dequantize_row(table, tokens[t], out + t * static_cast<size_t>(table.cols));
}

void CpuBackend::rms_norm(const float* x, const float* weight, float* out, int64_t n_rows,
                          int64_t dim, float eps) {
  cpu::rms_norm(x, weight, out, n_rows, dim, eps, pool_);
}

void CpuBackend::add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim) {
  cpu::add_bias(x, bias, n_rows, dim, pool_);
}

void CpuBackend::rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
                      int rope_dim, const float* inv_freq, bool neox) {
  cpu::rope(x, positions, n_rows, n_heads, head_dim, rope_dim, inv_freq, neox, pool_);
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  cpu::swiglu(gate, up, out, n, pool_);
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  cpu::add(x, y, n, pool_);
}

// One parallel region for all targets when they read the same activation format (Q, K and V;
// gate and up), else one matmul each.
void CpuBackend::matmul(const float* x, int64_t n_tokens, int64_t cols,
                        std::span<const MatmulTarget> targets, BackendScratch& scratch) {
  if (targets.empty()) return;
  if (targets.size() > 8)
    fail("cpu backend: matmul takes at most 8 targets, got {}", targets.size());
  Activations& act = static_cast<CpuScratch&>(scratch).act;
  MatmulOutput outs[8];
  bool same = true;
  for (size_t i = 0; i < targets.size(); ++i) {
    outs[i] = {&packed(*targets[i].w), targets[i].y};
    same = same && same_activation_format(targets[i].w->type(), targets[0].w->type());
  }
  if (same) {
    act.prepare(x, n_tokens, cols, targets[0].w->type(), pool_);
    cpu::matmul(std::span<const MatmulOutput>(outs, targets.size()), act, pool_);
    return;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    act.prepare(x, n_tokens, cols, outs[i].w->type(), pool_);
    cpu::matmul(*outs[i].w, act, outs[i].y, pool_);
  }
}

void CpuBackend::kv_write(const PagedKVLayer& kv, const float* k, const float* v,
                          const int32_t* slots, const int32_t* positions, int64_t n_tokens) {
  cpu::kv_write(kv, k, v, slots, positions, n_tokens);
}

void CpuBackend::attention(const PagedKVLayer& kv, const AttentionArgs& args) {
  cpu::attention(kv, args, pool_);
}

void CpuBackend::gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim,
                             float* out) {
  const auto d = static_cast<size_t>(dim);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out + i * d, x + static_cast<size_t>(rows[i]) * d, sizeof(float) * d);
}

}  // namespace kvasir::cpu
