// SPDX-License-Identifier: Apache-2.0
// Owning device memory for the CUDA backend (bucket state, snapshots, test data).
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/buffer.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "tequant/backend/cuda/check.cuh"

namespace tequant {

/// n values of T in device memory. Move-only; freeing synchronises the device (cudaFree), which is
/// what keeps a buffer that dies while kernels still use it safe.
template <class T>
class device_buffer {
 public:
  device_buffer() noexcept = default;
  explicit device_buffer(std::size_t n) : size_(n) {
    if (n != 0) detail::check(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)), "cudaMalloc(device_buffer)");
  }
  device_buffer(device_buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);  // a destructor cannot throw; a failed free leaks
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tequant
