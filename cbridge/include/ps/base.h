/*
 * Basic types and constants of the ps API.
 */
#ifndef PS_BASE_H_
#define PS_BASE_H_

#include <limits>

#include "ps/internal/utils.h"

namespace ps {

/* Keys are 64-bit. ps-lite's USE_KEY32 build switch (32-bit keys) is not
 * supported: the library and the wire always use 64-bit keys, so the
 * switch is ignored here rather than producing a mismatched ABI. */
#if defined(USE_KEY32) && USE_KEY32
#pragma message("elasticps: USE_KEY32 is ignored; ps::Key is 64-bit")
#endif
using Key = uint64_t;

/* The largest key. Server i owns [kMaxKey / n * i, kMaxKey / n * (i + 1)). */
static const Key kMaxKey = std::numeric_limits<Key>::max();

/* Node groups; OR them for unions (3, 5, 6, 7). */
static const int kScheduler = 1;
static const int kServerGroup = 2;
static const int kWorkerGroup = 4;

}  // namespace ps
#endif  // PS_BASE_H_
