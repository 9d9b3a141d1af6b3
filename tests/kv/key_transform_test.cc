// The key transform's checks (src/kvasir/kv/key_transform.h) and how the paged storage hands it
// to the kernels (kv/kv_storage.h): per-layer pointers into it, refused when its shape is not
// the cache's.
#include "kvasir/kv/key_transform.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "kvasir/kernels/backend.h"
#include "kvasir/kv/kv_storage.h"
#include "kvasir/util/error.h"
#include "kvasir/util/thread_pool.h"

namespace kvasir {
namespace {

KeyTransform make(int layers, int heads, int dim, bool scale) {
  KeyTransform t;
  t.n_layers = layers;
  t.n_kv_heads = heads;
  t.head_dim = dim;
  t.shift.assign(static_cast<size_t>(layers) * heads * dim, 0.5f);
  if (scale) t.scale.assign(t.shift.size(), 2.0f);
  return t;
}

std::string error_of(const KeyTransform& t) {
  try {
    t.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KeyTransform, ValidateNamesWhatIsWrong) {
  EXPECT_EQ(error_of(make(2, 2, 8, true)), "");
  EXPECT_NE(error_of(make(0, 2, 8, false)).find("bad shape"), std::string::npos);
  KeyTransform t = make(2, 2, 8, false);
  t.shift.pop_back();
  EXPECT_NE(error_of(t).find("31 shift values, expected 32"), std::string::npos) << error_of(t);
  t = make(2, 2, 8, true);
  t.scale[3] = 0.0f;
  EXPECT_NE(error_of(t).find("scale 3 is 0"), std::string::npos) << error_of(t);
  t = make(2, 2, 8, false);
  t.shift[5] = NAN;
  EXPECT_NE(error_of(t).find("shift 5 is not finite"), std::string::npos) << error_of(t);
  t = make(2, 2, 8, false);
  t.turn_pairs = 1;
  EXPECT_NE(error_of(t).find("0 turning terms, expected 4"), std::string::npos) << error_of(t);
  t.turn.assign(4, KeyTurn{6, 7, 0.01, 1.0f, -1.0f});
  EXPECT_EQ(error_of(t), "");
  t.turn[2].b = 8;
  EXPECT_NE(error_of(t).find("turning term 2 has channels 6 and 8"), std::string::npos)
      << error_of(t);
  t.turn[2] = {6, 6, 0.01, 1.0f, -1.0f};
  EXPECT_NE(error_of(t).find("expected two distinct ones below 8"), std::string::npos)
      << error_of(t);
  t.turn[2] = {6, 7, NAN, 1.0f, -1.0f};
  EXPECT_NE(error_of(t).find("turning term 2 has a non-finite"), std::string::npos) << error_of(t);
  t.turn_pairs = 5;
  EXPECT_NE(error_of(t).find("5 turning pairs per head, expected 0 .. 4"), std::string::npos)
      << error_of(t);
}

TEST(KeyTransform, DtypesGetTheirKind) {
  EXPECT_EQ(key_transform_kind(KVDType::F16), KeyTransformKind::kNone);
  EXPECT_EQ(key_transform_kind(KVDType::F32), KeyTransformKind::kNone);
  EXPECT_EQ(key_transform_kind(KVDType::Int8), KeyTransformKind::kShift);
  EXPECT_EQ(key_transform_kind(KVDType::FP8E4M3), KeyTransformKind::kShift);
  EXPECT_EQ(key_transform_kind(KVDType::FP8E5M2), KeyTransformKind::kShift);
  EXPECT_EQ(key_transform_kind(KVDType::Int4), KeyTransformKind::kShiftAndScale);
}

TEST(KeyTransform, StorageHandsEachLayerItsRowsAndRefusesAnotherShape) {
  ThreadPool pool(1);
  auto backend = make_backend(BackendKind::kCpu, pool);
  KVShape shape;
  shape.n_layers = 3;
  shape.n_kv_heads = 2;
  shape.head_dim = 8;
  shape.type = {KVDType::Int4, KVDType::F16};
  {
    KVStorage plain(shape, 4, *backend);
    EXPECT_EQ(plain.layer(1).k_shift, nullptr);
    EXPECT_EQ(plain.layer(1).k_scale, nullptr);
  }
  auto t = std::make_shared<const KeyTransform>(make(3, 2, 8, true));
  KVStorage kv(shape, 4, *backend, t);
  for (int l = 0; l < 3; ++l) {
    EXPECT_EQ(kv.layer(l).k_shift, t->shift.data() + 16 * l);
    EXPECT_EQ(kv.layer(l).k_scale, t->scale.data() + 16 * l);
  }
  auto shift_only = std::make_shared<const KeyTransform>(make(3, 2, 8, false));
  KVStorage kv2(shape, 4, *backend, shift_only);
  EXPECT_NE(kv2.layer(2).k_shift, nullptr);
  EXPECT_EQ(kv2.layer(2).k_scale, nullptr);  // scale 1
  // Turning terms: each layer's and head's entries, their angle's cos/sin rows over every position
  // the cache holds (4 blocks of 16), one row pair per distinct angle.
  KeyTransform turning = make(3, 2, 8, false);
  turning.turn_pairs = 2;
  for (int i = 0; i < 12; ++i)
    turning.turn.push_back({2 * (i % 4), 2 * (i % 4) + 1, i % 2 ? 0.5 : 0.001,
                            static_cast<float>(i), -static_cast<float>(i)});
  KVStorage kv3(shape, 4, *backend, std::make_shared<const KeyTransform>(turning));
  EXPECT_EQ(kv3.layer(0).k_turn_positions, 64);
  for (int l = 0; l < 3; ++l) {
    const PagedKVLayer L = kv3.layer(l);
    ASSERT_NE(L.k_turn, nullptr);
    EXPECT_EQ(L.k_turn_pairs, 2);
    for (int i = 0; i < 4; ++i) {
      const KeyTurn& want = turning.turn[static_cast<size_t>(4 * l + i)];
      const KeyTurnPair& got = L.k_turn[i];
      EXPECT_EQ(got.a, want.a);
      EXPECT_EQ(got.b, want.b);
      EXPECT_EQ(got.mu_a, want.mu_a);
      EXPECT_EQ(got.mu_b, want.mu_b);
      for (int p : {0, 1, 17, 63}) {
        EXPECT_EQ(got.cos[p], static_cast<float>(std::cos(p * want.theta))) << p;
        EXPECT_EQ(got.sin[p], static_cast<float>(std::sin(p * want.theta))) << p;
      }
      EXPECT_EQ(got.cos, kv3.layer(0).k_turn[i % 2].cos);  // the same angle, the same row
    }
  }
  EXPECT_NE(kv3.layer(0).k_turn[0].cos, kv3.layer(0).k_turn[1].cos);
  EXPECT_EQ(kv2.layer(0).k_turn, nullptr);  // no turning terms: none handed down
  try {
    KVStorage bad(shape, 4, *backend, std::make_shared<const KeyTransform>(make(3, 2, 16, false)));
    ADD_FAILURE() << "a transform for head dim 16 was taken by a head-dim-8 cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dim 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir
