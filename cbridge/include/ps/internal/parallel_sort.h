/*
 * ps::ParallelSort: sorts an SArray with up to num_threads threads (merge
 * sort over std::sort'ed pieces). A utility of ps-lite kept for source
 * compatibility.
 */
#ifndef PS_INTERNAL_PARALLEL_SORT_H_
#define PS_INTERNAL_PARALLEL_SORT_H_

#include <algorithm>
#include <functional>
#include <thread>

#include "ps/sarray.h"

namespace ps {
namespace detail {

template <typename T, class Fn>
void SortPieces(T* data, size_t len, size_t grainsize, const Fn& cmp) {
  if (len <= grainsize) {
    std::sort(data, data + len, cmp);
    return;
  }
  size_t half = len / 2;
  std::thread left([=, &cmp] { SortPieces(data, half, grainsize, cmp); });
  SortPieces(data + half, len - half, grainsize, cmp);
  left.join();
  std::inplace_merge(data, data + half, data + len, cmp);
}

}  // namespace detail

template <typename T, class Fn = std::less<T>>
void ParallelSort(SArray<T>* arr, int num_threads = 2,
                  const Fn& cmp = Fn()) {
  CHECK_GT(num_threads, 0);
  // Pieces below 16K elements are not worth a thread.
  size_t grainsize = std::max(arr->size() / num_threads + 5,
                              static_cast<size_t>(1024 * 16));
  detail::SortPieces(arr->data(), arr->size(), grainsize, cmp);
}

}  // namespace ps
#endif  // PS_INTERNAL_PARALLEL_SORT_H_
