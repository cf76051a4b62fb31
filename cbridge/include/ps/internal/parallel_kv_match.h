/*
 * ps::ParallelOrderedMatch: for sorted key lists src and dst, applies
 * dst_val[j] op= src_val[i] (k values per key) where dst_key[j] ==
 * src_key[i]. A utility of ps-lite kept for source compatibility; it runs
 * on the calling thread (num_threads is accepted and ignored).
 */
#ifndef PS_INTERNAL_PARALLEL_KV_MATCH_H_
#define PS_INTERNAL_PARALLEL_KV_MATCH_H_

#include <algorithm>

#include "ps/internal/assign_op.h"
#include "ps/sarray.h"

namespace ps {

/* Resizes *dst_val to dst_key.size() * k and returns the number of matched
 * keys. */
template <typename K, typename V, typename C>
size_t ParallelOrderedMatch(const SArray<K>& src_key, const SArray<V>& src_val,
                            const SArray<K>& dst_key, C* dst_val, int k = 1,
                            AssignOp op = ASSIGN, int num_threads = 1) {
  CHECK_GT(num_threads, 0);
  CHECK_GT(k, 0);
  CHECK_EQ(src_key.size() * k, src_val.size());
  CHECK_NOTNULL(dst_val);
  dst_val->resize(dst_key.size() * k);
  size_t matched = 0;
  size_t i = 0, j = 0;
  while (i < src_key.size() && j < dst_key.size()) {
    if (src_key[i] < dst_key[j]) {
      ++i;
    } else if (dst_key[j] < src_key[i]) {
      ++j;
    } else {
      for (int e = 0; e < k; ++e) {
        AssignFunc(src_val[i * k + e], op, &(*dst_val)[j * k + e]);
      }
      ++matched;
      ++i;
      ++j;
    }
  }
  return matched;
}

}  // namespace ps
#endif  // PS_INTERNAL_PARALLEL_KV_MATCH_H_
