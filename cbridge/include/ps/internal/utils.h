/*
 * Small helpers shared by the ps headers: typed environment lookups and
 * the LL shorthand.
 */
#ifndef PS_INTERNAL_UTILS_H_
#define PS_INTERNAL_UTILS_H_

#include <inttypes.h>

#include <cstdlib>

#include "dmlc/logging.h"
#include "ps/internal/env.h"

namespace ps {

/* The value of key (see Environment::find) converted to V by V's
 * constructor from const char*, or default_val if unset. */
template <typename V>
inline V GetEnv(const char* key, V default_val) {
  const char* val = Environment::Get()->find(key);
  return val == nullptr ? default_val : V(val);
}

/* The integer value of key (atoi), or default_val if unset. */
inline int GetEnv(const char* key, int default_val) {
  const char* val = Environment::Get()->find(key);
  return val == nullptr ? default_val : atoi(val);
}

#ifndef DISALLOW_COPY_AND_ASSIGN
#define DISALLOW_COPY_AND_ASSIGN(T) \
  T(const T&);                      \
  void operator=(const T&)
#endif

/* ps-lite's shorthand for an error-level log line. */
#define LL LOG(ERROR)

}  // namespace ps
#endif  // PS_INTERNAL_UTILS_H_
