// A std::vector whose resize leaves new elements uninitialised (default-initialised, which for
// arithmetic types means untouched), for large packed buffers that the packing loop writes in
// full on several threads: a value-initialising resize would zero gigabytes on one thread first,
// and the first touch (the page faults) would all land there too.
#pragma once
#include <memory>
#include <vector>

namespace qt::kernels {

template <typename T>
struct UninitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <typename U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
};

template <typename T>
using UninitVector = std::vector<T, UninitAllocator<T>>;

}  // namespace qt::kernels
