// SPDX-License-Identifier: Apache-2.0
// The engine's FP32 GEMMs. Trainers run their GEMMs through a BLAS; when the build found one it defines
// MINI_HAVE_CBLAS and these call cblas_sgemm, otherwise they fall back to i-k-j loops (the inner loop
// is a contiguous axpy the compiler vectorises). The loops compute a^T and b^T products exactly as
// gemm(transpose(a), b) would, so the fallback's numbers do not depend on which helper a caller picks.
#pragma once
#include <cstddef>

#include "autograd.hpp"

#ifdef MINI_HAVE_CBLAS
#include <cblas.h>
#endif

namespace mini {

/// "OpenBLAS (cblas_sgemm)" or the fallback's name: examples print it at start-up.
inline const char* gemm_backend_name() {
#ifdef MINI_HAVE_CBLAS
  return "cblas_sgemm (BLAS)";
#else
  return "hand-written i-k-j loop (no BLAS found at configure time)";
#endif
}

inline matrix transpose(const matrix& a) {
  matrix t(a.cols, a.rows);
  for (std::size_t i = 0; i < a.rows; ++i)
    for (std::size_t j = 0; j < a.cols; ++j) t.data[j * a.rows + i] = a.data[i * a.cols + j];
  return t;
}

namespace detail {
inline matrix gemm_loop(const matrix& a, const matrix& b) {
  matrix c(a.rows, b.cols);
  for (std::size_t i = 0; i < a.rows; ++i) {
    float* ci = &c.data[i * c.cols];
    for (std::size_t k = 0; k < a.cols; ++k) {
      const float aik = a.data[i * a.cols + k];
      const float* bk = &b.data[k * b.cols];
      for (std::size_t j = 0; j < b.cols; ++j) ci[j] += aik * bk[j];
    }
  }
  return c;
}

#ifdef MINI_HAVE_CBLAS
// op(a)[M,K] op(b)[K,N] for row-major a, b.
inline matrix gemm_blas(const matrix& a, bool ta, const matrix& b, bool tb) {
  const std::size_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols, n = tb ? b.rows : b.cols;
  matrix c(m, n);
  if (m == 0 || n == 0 || k == 0) return c;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a.data.data(), static_cast<int>(a.cols), b.data.data(),
              static_cast<int>(b.cols), 0.0f, c.data.data(), static_cast<int>(n));
  return c;
}
#endif
}  // namespace detail

/// c[M,N] = a[M,K] b[K,N]
inline matrix gemm(const matrix& a, const matrix& b) {
#ifdef MINI_HAVE_CBLAS
  return detail::gemm_blas(a, false, b, false);
#else
  return detail::gemm_loop(a, b);
#endif
}

/// c[M,N] = a[M,K] b[N,K]^T (forward of y = x W^T)
inline matrix gemm_nt(const matrix& a, const matrix& b) {
#ifdef MINI_HAVE_CBLAS
  return detail::gemm_blas(a, false, b, true);
#else
  return detail::gemm_loop(a, transpose(b));
#endif
}

/// c[M,N] = a[K,M]^T b[K,N] (weight gradients: dW = dY^T X)
inline matrix gemm_tn(const matrix& a, const matrix& b) {
#ifdef MINI_HAVE_CBLAS
  return detail::gemm_blas(a, true, b, false);
#else
  return detail::gemm_loop(transpose(a), b);
#endif
}

}  // namespace mini
