// Paged KV storage: the memory that holds every layer's keys and values, carved into blocks.
//
// A block holds `block_size` consecutive token positions of one sequence, for every KV head of one
// layer, laid out [kv_head][codes of the tokens | their scales] (kernels/views.h); the element
// formats (f16, f32, int8, fp8_e4m3, fp8_e5m2, int4) are defined in tensor/kv_quant.h, and K and
// V may use different ones. All layers share block
// ids: block b of the cache is block b in every layer, so one block table per sequence addresses
// all layers. Memory is allocated once, at construction, in the backend's memory (device memory
// for a GPU backend); nothing grows afterwards (sequences borrow blocks from a BlockPool).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvasir/kernels/backend.h"
#include "kvasir/kernels/views.h"
#include "kvasir/kv/key_transform.h"
#include "kvasir/tensor/kv_quant.h"

namespace kvasir {

struct KVShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  KVCacheType type{};  // K and V element formats

  // Bytes of K and V for one token across all layers, scales included:
  // n_layers * n_kv_heads * (K row bytes + V row bytes) (kv_row_layout).
  size_t bytes_per_token() const;
  size_t bytes_per_block() const { return bytes_per_token() * static_cast<size_t>(block_size); }
};

class KVStorage {
 public:
  // Allocates n_blocks blocks for every layer in `backend`'s memory. Keys are stored through
  // `key_transform` (kv/key_transform.h; null: as they are); it must match the shape, and the
  // storage keeps it for its life (its vectors are read in host memory, where the CPU backend's
  // kernels run). A transform with turning terms also gets a cos/sin table of their angles over
  // every position the cache can hold (n_blocks * block_size: 8 bytes per position and distinct
  // angle, ~0.5 MiB for 32 angles at 2048 positions), in host memory. Throws kvasir::Error for a
  // bad shape, dtype or transform, or if the allocation fails.
  KVStorage(const KVShape& shape, int64_t n_blocks, Backend& backend,
            std::shared_ptr<const KeyTransform> key_transform = nullptr);

  const KVShape& shape() const { return shape_; }
  int64_t n_blocks() const { return n_blocks_; }
  size_t bytes() const;
  PagedKVLayer layer(int i) const { return layers_[static_cast<size_t>(i)]; }

 private:
  KVShape shape_;
  int64_t n_blocks_;
  std::unique_ptr<DeviceBuffer> memory_;
  std::shared_ptr<const KeyTransform> key_transform_;
  std::vector<float> turn_table_;        // per distinct angle: cos then sin of p * theta
  std::vector<KeyTurnPair> turn_pairs_;  // [layer][kv head][term], pointing into turn_table_
  std::vector<PagedKVLayer> layers_;
};

}  // namespace kvasir
