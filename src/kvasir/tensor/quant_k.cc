#include "kvasir/tensor/quant_k.h"

#include "kvasir/util/error.h"

namespace kvasir {

void quantize_rows_k(DType t, const float*, void*, int64_t, int64_t, const float*) {
  fail("quantize: {} is not implemented yet", dtype_name(t));
}
void dequantize_row_k(DType t, const void*, float*, int64_t) {
  fail("dequantize: {} is not implemented yet", dtype_name(t));
}

}  // namespace kvasir
