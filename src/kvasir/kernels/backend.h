// The backend seam: the one interface through which the forward pass (model/) calls kernels.
//
// A Backend is a device plus what executes on it (the CPU backend: this machine's cores through a
// ThreadPool; a GPU backend: a device and its stream). It owns three kinds of things: memory
// (DeviceBuffer: the KV cache, a forward pass's scratch), weights in its compute layout
// (DeviceMatrix: the CPU's packed panels) and a per-runner scratch for its own needs
// (BackendScratch: the CPU's prepared activations). Every float* an operation takes points into
// that backend's memory; the views of kernels/views.h describe the rest (the KV layout, block
// tables) and the Batch's index arrays stay in host memory, for the backend to read or upload.
//
// The arithmetic of each operation is the contract of the CPU kernel it names (kernels/cpu/*.h);
// a second backend implements the same calls over the same Batch, and tests hold it to the same
// results. Nothing in model/, kv/ or engine/ includes a backend's own headers: they see this file
// and views.h only. Operations throw kvasir::Error on bad shapes before any work starts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvasir/kernels/views.h"
#include "kvasir/tensor/dtype.h"

namespace kvasir {

class ThreadPool;

enum class BackendKind { kCpu };
const char* backend_kind_name(BackendKind kind);

// Memory in a backend's address space (host memory for the CPU), zero-filled and 64-byte aligned.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 protected:
  DeviceBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

 private:
  void* data_;
  size_t bytes_;
};

// A weight matrix (rows output features x cols input features) in a backend's compute layout.
class DeviceMatrix {
 public:
  virtual ~DeviceMatrix() = default;
  virtual BackendKind backend() const = 0;
  // Bytes the matrix occupies in the backend's memory.
  virtual size_t bytes() const = 0;
  DType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

 protected:
  DeviceMatrix() = default;
  DeviceMatrix(DType type, int64_t rows, int64_t cols) : type_(type), rows_(rows), cols_(cols) {}
  DeviceMatrix(DeviceMatrix&&) noexcept = default;
  DeviceMatrix& operator=(DeviceMatrix&&) noexcept = default;

 private:
  DType type_ = DType::F32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

// What a backend keeps per runner beyond the named buffers of a ForwardState.
class BackendScratch {
 public:
  virtual ~BackendScratch() = default;
};

// One output of a matmul: y (n_tokens x w->rows() floats) = x · Wᵀ.
struct MatmulTarget {
  const DeviceMatrix* w;
  float* y;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  // For logs and /health: e.g. "cpu (AVX3_ZEN4, 2 threads)".
  virtual std::string description() const = 0;
  // True when the backend's memory is host memory (a float* it returns can be read directly).
  virtual bool shares_host_memory() const = 0;

  // ---- memory and weights ----
  // Throws kvasir::Error naming `what` (e.g. "the KV cache") when the memory is not there.
  virtual std::unique_ptr<DeviceBuffer> alloc(size_t bytes, const char* what) = 0;
  // Converts a matrix (ggml row layout, host memory) to the backend's compute layout.
  virtual std::unique_ptr<DeviceMatrix> load_matrix(const MatrixView& w) = 0;
  // A vector of n floats (norm weights, biases, RoPE frequencies) in the backend's memory. The
  // CPU backend reads `host` in place (it must outlive the buffer); others copy it.
  virtual std::unique_ptr<DeviceBuffer> load_vector(const float* host, int64_t n) = 0;
  // Bytes load_matrix() would take for such a matrix (memory planning).
  virtual size_t matrix_bytes(DType type, int64_t rows, int64_t cols) const = 0;
  virtual std::unique_ptr<BackendScratch> new_scratch() = 0;
  // Copies `bytes` from backend memory to host memory.
  virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;

  // ---- the forward pass's operations (cpu/ops.h, cpu/matmul.h, cpu/attention.h) ----
  // out row t = row tokens[t] of `table` as floats (token ids checked by the caller).
  virtual void embed(const MatrixView& table, std::span<const int32_t> tokens, float* out) = 0;
  virtual void rms_norm(const float* x, const float* weight, float* out, int64_t n_rows,
                        int64_t dim, float eps) = 0;
  // x[t][i] += bias[i] for each of n_rows rows of dim floats.
  virtual void add_bias(float* x, const float* bias, int64_t n_rows, int64_t dim) = 0;
  virtual void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim,
                    int rope_dim, const float* inv_freq, bool neox) = 0;
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // Every target's y = x · Wᵀ, x being n_tokens rows of `cols` floats; the inputs are prepared
  // once for all targets (in `scratch`).
  virtual void matmul(const float* x, int64_t n_tokens, int64_t cols,
                      std::span<const MatmulTarget> targets, BackendScratch& scratch) = 0;
  // positions: each row's position (needed when the cache's key transform has turning terms,
  // else may be null).
  virtual void kv_write(const PagedKVLayer& kv, const float* k, const float* v,
                        const int32_t* slots, const int32_t* positions, int64_t n_tokens) = 0;
  virtual void attention(const PagedKVLayer& kv, const AttentionArgs& args) = 0;
  // out row i = x row rows[i] (rows of dim floats).
  virtual void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim,
                           float* out) = 0;
};

// The backend of `kind`, computing on `pool` (which must outlive it).
std::unique_ptr<Backend> make_backend(BackendKind kind, ThreadPool& pool);

}  // namespace kvasir
