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
  try {
    KVStorage bad(shape, 4, *backend, std::make_shared<const KeyTransform>(make(3, 2, 16, false)));
    ADD_FAILURE() << "a transform for head dim 16 was taken by a head-dim-8 cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dim 16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvasir
