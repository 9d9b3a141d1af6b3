// Dense symmetric positive-definite linear algebra for the calibrated quantizers (GPTQ's inverse
// Hessian), in double precision on row-major n x n matrices. Plain O(n^3) loops arranged so that
// every inner product runs over contiguous rows (the compiler vectorizes them); enough for the
// layer widths this slice targets (up to a few thousand columns).
//
// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers", Algorithm 1 and the reference gptq.py) needs the upper Cholesky
// factor U of H^-1 (H^-1 = U^T U): row q of U holds, scaled by U[q][q], the coefficients with
// which quantizing column q updates the columns after it. gptq_inverse_factor() computes it as
// the reference does (torch.linalg.cholesky, cholesky_inverse, cholesky(upper=True)).
#pragma once

#include <cstdint>
#include <vector>

namespace kvasir {

// In place: a (n x n, symmetric; only the lower triangle is read) becomes L, lower triangular
// with a = L L^T (the upper triangle is zeroed). Returns false, leaving a unspecified, when a is
// not (numerically) positive definite: a pivot <= 0 or not finite.
bool cholesky_lower(std::vector<double>& a, int64_t n);

// The inverse of a = L L^T from its factor L (as cholesky_lower left it): a^-1 = L^-T L^-1,
// full symmetric n x n.
std::vector<double> cholesky_inverse(const std::vector<double>& l, int64_t n);

// GPTQ's factor: U upper triangular with h^-1 = U^T U, from a symmetric positive-definite h
// (already dampened). Returns false when h or h^-1 fails to factor.
bool gptq_inverse_factor(const std::vector<double>& h, int64_t n, std::vector<double>& u);

}  // namespace kvasir
