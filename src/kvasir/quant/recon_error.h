// A quantized layer's output error on calibration activations, from their Gram matrix alone:
// with X the n x cols activations and G = X^T X (cols x cols),
//   ||X W^T - X W'^T||_F^2 = sum over rows r of (w_r - w'_r) G (w_r - w'_r)^T,
// so ||WX - W'X|| / ||WX|| (the per-layer number, GPTQ's and AWQ's objective) needs no
// stored activations. Rows are summed in order in double, so the value does not depend on the
// thread count.
#pragma once

#include <cstdint>

#include "kvasir/util/thread_pool.h"

namespace kvasir {

// sum_r (a_r - b_r) G (a_r - b_r)^T over rows x cols row-major matrices; b may be null (zero).
double gram_quadratic(const float* a, const float* b, int64_t rows, int64_t cols,
                      const double* gram, ThreadPool* pool = nullptr);

// ||W X - W' X|| / ||W X|| (0 when W X = 0).
double relative_output_error(const float* w, const float* w_hat, int64_t rows, int64_t cols,
                             const double* gram, ThreadPool* pool = nullptr);

}  // namespace kvasir
