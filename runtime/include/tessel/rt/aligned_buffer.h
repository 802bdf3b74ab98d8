// A 64-byte aligned float buffer: holds pre-packed weights and kernels' scratch space.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace tessel::rt {

/// Owning, 64-byte aligned, uninitialised float array (a cache line per start, for packed panels).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  /// Allocates `count` floats (contents undefined).
  explicit AlignedBuffer(size_t count) { resize(count); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  /// Reallocates to `count` floats (contents are not preserved).
  void resize(size_t count) {
    std::free(data_);
    size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes == 0 ? 64 : bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    size_ = count;
  }
  /// Grows (never shrinks) to at least `count` floats; used for reusable scratch.
  float* ensure(size_t count) {
    if (count > size_) resize(count);
    return data_;
  }
  /// Sets every element to zero.
  void zero() { std::memset(data_, 0, size_ * sizeof(float)); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessel::rt
