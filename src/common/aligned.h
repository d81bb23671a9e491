#pragma once
// 64-byte aligned fp32/byte buffers: packed weights and activations are read with aligned
// vector loads, and a cache line never straddles two threads' outputs.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace parity {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { resize(n); }
  void resize(std::size_t n) {
    if (n == size_) return;
    std::size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    void* p = bytes ? std::aligned_alloc(64, bytes) : nullptr;
    if (bytes && !p) throw std::bad_alloc();
    ptr_.reset(static_cast<T*>(p));
    size_ = n;
  }
  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return ptr_.get()[i]; }
  const T& operator[](std::size_t i) const { return ptr_.get()[i]; }

 private:
  std::unique_ptr<T, FreeDeleter> ptr_;
  std::size_t size_ = 0;
};

}  // namespace parity
