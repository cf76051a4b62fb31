/*
 * dmlc/base.h for the elasticps bridge: the few build switches and helpers
 * that ps-lite's headers and their consumers expect from dmlc-core.
 *
 * The include guard is dmlc-core's own on purpose: when a consumer (MXNet)
 * also has dmlc-core on its include path, whichever copy is included first
 * wins and the other is skipped, as with ps-lite's bundled copy.
 */
#ifndef DMLC_BASE_H_
#define DMLC_BASE_H_

#include <inttypes.h>
#include <sys/types.h>

#include <string>
#include <vector>

/* glog is never used by the bridge; the logging header is self-contained. */
#ifndef DMLC_USE_GLOG
#define DMLC_USE_GLOG 0
#endif

/* LOG(FATAL) and failed CHECKs throw dmlc::Error (as ps-lite's copy does);
 * set to 0 to abort instead. */
#ifndef DMLC_LOG_FATAL_THROW
#define DMLC_LOG_FATAL_THROW 1
#endif

#ifndef DMLC_USE_CXX11
#if defined(__GXX_EXPERIMENTAL_CXX0X__) || __cplusplus >= 201103L
#define DMLC_USE_CXX11 1
#else
#define DMLC_USE_CXX11 0
#endif
#endif

#ifndef DMLC_USE_PS
#define DMLC_USE_PS 1
#endif

#ifndef DMLC_USE_HDFS
#define DMLC_USE_HDFS 0
#endif

#ifndef DMLC_USE_S3
#define DMLC_USE_S3 0
#endif

/* Make a class non-copyable and non-movable. */
#ifndef DISALLOW_COPY_AND_ASSIGN
#define DISALLOW_COPY_AND_ASSIGN(T) \
  T(T const &) = delete;            \
  T(T &&) = delete;                 \
  T &operator=(T const &) = delete; \
  T &operator=(T &&) = delete
#endif

namespace dmlc {

/* Pointer to the first element, or NULL for an empty container. */
template <typename T>
inline T *BeginPtr(std::vector<T> &v) {  // NOLINT(runtime/references)
  return v.empty() ? nullptr : &v[0];
}

template <typename T>
inline const T *BeginPtr(const std::vector<T> &v) {
  return v.empty() ? nullptr : &v[0];
}

inline char *BeginPtr(std::string &s) {  // NOLINT(runtime/references)
  return s.empty() ? nullptr : &s[0];
}

inline const char *BeginPtr(const std::string &s) {
  return s.empty() ? nullptr : s.data();
}

}  // namespace dmlc

#endif  // DMLC_BASE_H_
