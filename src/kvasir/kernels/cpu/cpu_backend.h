// The CPU backend (kernels/backend.h): host memory, weights as PackedMatrix panels, every
// operation the CPU kernel of the same name (ops.h, matmul.h, attention.h) run on one ThreadPool.
#pragma once

#include "kvasir/kernels/backend.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool& pool) : pool_(pool) {}

  BackendKind kind() const override { return BackendKind::kCpu; }
  std::string description() const override;
  bool shares_host_memory() const override { return true; }

  std::unique_ptr<DeviceBuffer> alloc(size_t bytes, const char* what) override;
  std::unique_ptr<DeviceMatrix> load_matrix(const MatrixView& w) override;
  std::unique_ptr<DeviceBuffer> load_vector(const float* host, int64_t n) override;
  size_t matrix_bytes(DType type, int64_t rows, int64_t cols) const override;
  std::unique_ptr<BackendScratch> new_scratch() override;
  void copy_to_host(void* host, const void* src, size_t bytes) override;

  void embed(const MatrixView& table, std::span<const int32_t> tokens, float* out) override;
  void rms_norm(const float* x, const float* weight, float* out, int64_t n_rows, int64_t dim,
                float eps) override;
  void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim) override;
  void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
            int rope_dim, const float* inv_freq, bool neox) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void matmul(const float* x, int64_t n_tokens, int64_t cols, std::span<const MatmulTarget> targets,
              BackendScratch& scratch) override;
  void kv_write(const PagedKVLayer& kv, const float* k, const float* v, const int32_t* slots,
                const int32_t* positions, int64_t n_tokens) override;
  void attention(const PagedKVLayer& kv, const AttentionArgs& args) override;
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* out) override;

 private:
  ThreadPool& pool_;
};

}  // namespace kvasir::cpu
