// A 64-byte aligned float buffer: holds pre-packed weights and kernels' scratch space.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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
    // Large buffers (a model's packed weights, its activation arena) on 2 MiB pages where the kernel
    // offers them: weights are streamed from memory once per inference, and with 4 KiB pages every 64
    // cache lines cost a TLB miss (a nested page walk on a VM).
    const size_t align = count * sizeof(float) >= kHugeBytes ? kHugePage : 64;
    size_t bytes = (count * sizeof(float) + align - 1) / align * align;
    data_ = static_cast<float*>(std::aligned_alloc(align, bytes == 0 ? 64 : bytes));
    if (data_ == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == kHugePage) madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: failure changes nothing
#endif
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
  static constexpr size_t kHugePage = size_t{2} << 20, kHugeBytes = size_t{4} << 20;
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessel::rt
