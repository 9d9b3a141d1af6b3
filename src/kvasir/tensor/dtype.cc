#include "kvasir/tensor/dtype.h"

#include <array>

#include "kvasir/util/error.h"

namespace kvasir {

namespace {
// Type ids, names and block geometry as ggml defines them (ggml.h / ggml.c type traits).
constexpr std::array<DTypeInfo, 20> kInfos = {{
    {DType::F32, "f32", 1, 4},
    {DType::F16, "f16", 1, 2},
    {DType::Q4_0, "q4_0", 32, 18},
    {DType::Q4_1, "q4_1", 32, 20},
    {DType::Q5_0, "q5_0", 32, 22},
    {DType::Q5_1, "q5_1", 32, 24},
    {DType::Q8_0, "q8_0", 32, 34},
    {DType::Q8_1, "q8_1", 32, 36},
    {DType::Q2_K, "q2_k", 256, 84},
    {DType::Q3_K, "q3_k", 256, 110},
    {DType::Q4_K, "q4_k", 256, 144},
    {DType::Q5_K, "q5_k", 256, 176},
    {DType::Q6_K, "q6_k", 256, 210},
    {DType::Q8_K, "q8_k", 256, 292},
    {DType::I8, "i8", 1, 1},
    {DType::I16, "i16", 1, 2},
    {DType::I32, "i32", 1, 4},
    {DType::I64, "i64", 1, 8},
    {DType::F64, "f64", 1, 8},
    {DType::BF16, "bf16", 1, 2},
}};
}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& i : kInfos)
    if (static_cast<uint32_t>(i.type) == id) return i;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i;
  fail("unknown dtype id {}", static_cast<uint32_t>(t));
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfos)
    if (i.name == name) return i.type;
  return std::nullopt;
}

}  // namespace kvasir
