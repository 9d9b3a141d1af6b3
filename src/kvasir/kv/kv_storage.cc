#include "kvasir/kv/kv_storage.h"

#include <cmath>
#include <map>
#include <utility>

#include "kvasir/util/error.h"

namespace kvasir {

size_t KVShape::bytes_per_token() const {
  return static_cast<size_t>(n_layers) * static_cast<size_t>(n_kv_heads) *
         (kv_row_layout(type.k, head_dim).bytes() + kv_row_layout(type.v, head_dim).bytes());
}

KVStorage::KVStorage(const KVShape& shape, int64_t n_blocks, Backend& backend,
                     std::shared_ptr<const KeyTransform> key_transform)
    : shape_(shape), n_blocks_(n_blocks), key_transform_(std::move(key_transform)) {
  if (n_blocks <= 0 || shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_size <= 0)
    fail("invalid KV cache shape: {} blocks, {} layers, {} kv heads, head dim {}, block size {}",
         n_blocks, shape.n_layers, shape.n_kv_heads, shape.head_dim, shape.block_size);
  if (key_transform_) {
    key_transform_->validate();
    if (key_transform_->n_layers != shape.n_layers ||
        key_transform_->n_kv_heads != shape.n_kv_heads ||
        key_transform_->head_dim != shape.head_dim)
      fail(
          "KV cache: the key transform is for {} layers, {} KV heads, head dim {}; the cache has "
          "{}, {}, {}",
          key_transform_->n_layers, key_transform_->n_kv_heads, key_transform_->head_dim,
          shape.n_layers, shape.n_kv_heads, shape.head_dim);
  }
  PagedKVLayer proto;
  proto.k_type = shape.type.k;
  proto.v_type = shape.type.v;
  proto.block_size = shape.block_size;
  proto.n_kv_heads = shape.n_kv_heads;
  proto.head_dim = shape.head_dim;
  proto.n_blocks = n_blocks;
  const size_t k_layer = static_cast<size_t>(n_blocks) * shape.n_kv_heads * proto.k_tile_bytes();
  const size_t v_layer = static_cast<size_t>(n_blocks) * shape.n_kv_heads * proto.v_tile_bytes();
  memory_ = backend.alloc((k_layer + v_layer) * shape.n_layers, "the KV cache");
  auto* base = static_cast<uint8_t*>(memory_->data());
  // The turning terms' table: one cos row and one sin row per distinct angle, each over every
  // position the cache holds plus 8 (attention reads a whole group of 8 keys past a block's end).
  const int64_t n_pos = n_blocks * shape.block_size;
  const size_t row = static_cast<size_t>(n_pos) + 8;
  if (key_transform_ && !key_transform_->turn.empty()) {
    std::map<double, size_t> rows;  // angle -> its cos row
    for (const KeyTurn& t : key_transform_->turn) {
      if (rows.contains(t.theta)) continue;
      const size_t r = 2 * row * rows.size();
      rows.emplace(t.theta, r);
      turn_table_.resize(r + 2 * row, 0.0f);
      for (int64_t p = 0; p < n_pos; ++p) {
        const double a = static_cast<double>(p) * t.theta;
        turn_table_[r + static_cast<size_t>(p)] = static_cast<float>(std::cos(a));
        turn_table_[r + row + static_cast<size_t>(p)] = static_cast<float>(std::sin(a));
      }
    }
    turn_pairs_.reserve(key_transform_->turn.size());
    for (const KeyTurn& t : key_transform_->turn) {
      const float* c = turn_table_.data() + rows.at(t.theta);
      turn_pairs_.push_back({t.a, t.b, t.mu_a, t.mu_b, c, c + row});
    }
  }
  for (int l = 0; l < shape.n_layers; ++l) {
    PagedKVLayer L = proto;
    L.k = base + l * (k_layer + v_layer);
    L.v = base + l * (k_layer + v_layer) + k_layer;
    if (key_transform_) {
      L.k_shift = key_transform_->layer_shift(l);
      L.k_scale = key_transform_->layer_scale(l);
      if (!turn_pairs_.empty()) {
        L.k_turn_pairs = key_transform_->turn_pairs;
        L.k_turn = turn_pairs_.data() +
                   static_cast<size_t>(shape.n_kv_heads) * L.k_turn_pairs * static_cast<size_t>(l);
        L.k_turn_positions = n_pos;
      }
    }
    layers_.push_back(L);
  }
}

size_t KVStorage::bytes() const {
  return shape_.bytes_per_token() * shape_.block_size * n_blocks_;
}

}  // namespace kvasir
