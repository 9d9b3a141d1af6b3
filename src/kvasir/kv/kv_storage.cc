#include "kvasir/kv/kv_storage.h"

#include "kvasir/util/error.h"

namespace kvasir {

size_t KVShape::bytes_per_token() const {
  return 2 * static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads) *
         static_cast<size_t>(head_dim) * dtype_info(type).block_bytes;
}

KVStorage::KVStorage(const KVShape& shape, int64_t n_blocks, Backend& backend)
    : shape_(shape), n_blocks_(n_blocks) {
  if (shape.type != DType::F16 && shape.type != DType::F32)
    fail("KV cache dtype {} is not supported (expected f16 or f32)", dtype_name(shape.type));
  if (n_blocks <= 0 || shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_size <= 0)
    fail("invalid KV cache shape: {} blocks, {} layers, {} kv heads, head dim {}, block size {}",
         n_blocks, shape.n_layers, shape.n_kv_heads, shape.head_dim, shape.block_size);
  const size_t elem = dtype_info(shape.type).block_bytes;
  const size_t per_layer_one =
      static_cast<size_t>(n_blocks) * shape.block_size * shape.n_kv_heads * shape.head_dim * elem;
  memory_ = backend.alloc(2 * per_layer_one * shape.n_layers, "the KV cache");
  auto* base = static_cast<uint8_t*>(memory_->data());
  for (int l = 0; l < shape.n_layers; ++l) {
    PagedKVLayer L;
    L.type = shape.type;
    L.block_size = shape.block_size;
    L.n_kv_heads = shape.n_kv_heads;
    L.head_dim = shape.head_dim;
    L.n_blocks = n_blocks;
    L.k = base + (2 * l) * per_layer_one;
    L.v = base + (2 * l + 1) * per_layer_one;
    layers_.push_back(L);
  }
}

size_t KVStorage::bytes() const {
  return shape_.bytes_per_token() * shape_.block_size * n_blocks_;
}

}  // namespace kvasir
