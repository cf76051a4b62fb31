/*
 * dmlc/logging.h for the elasticps bridge: LOG(...) and CHECK(...) as ps-lite
 * programs use them.
 *
 *  - LOG(INFO|WARNING|ERROR) << ...   writes one line to stderr, through the
 *    library (ps_log), in the format of the job's Go nodes: time to the
 *    millisecond, level, the message, the node's role and file:line.
 *  - LOG(FATAL) << ... and failed CHECKs log the message and throw
 *    dmlc::Error (with DMLC_LOG_FATAL_THROW=0: abort instead). Uncaught,
 *    the process aborts (exit status 134), as with ps-lite.
 *  - CHECK_EQ & co. compare with the operator and do not print the operands,
 *    so they work with any comparable type (iterators, enums).
 *
 * The include guard is dmlc-core's own; see dmlc/base.h.
 */
#ifndef DMLC_LOGGING_H_
#define DMLC_LOGGING_H_

#include <assert.h>
#include <stddef.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
// Consumers of ps-lite get <iostream> through this header. The library's
// own C++ translation unit opts out, so that libps does not need
// libstdc++'s stream initialisation.
#ifndef PS_BRIDGE_NO_IOSTREAM
#include <iostream>
#endif
#include <sstream>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "./base.h"

#if DMLC_USE_CXX11
#define DMLC_THROW_EXCEPTION noexcept(false)
#else
#define DMLC_THROW_EXCEPTION
#endif

namespace dmlc {

/* What LOG(FATAL) and failed CHECKs throw. */
struct Error : public std::runtime_error {
  explicit Error(const std::string &s) : std::runtime_error(s) {}
};

/* Logging needs no initialisation; kept for source compatibility. */
inline void InitLogging(const char * /*argv0*/) {}

/* Severities, as ps_log takes them. */
enum LogSeverity { kLogInfo = 0, kLogWarning = 1, kLogError = 2, kLogFatal = 3 };

}  // namespace dmlc

/* Defined by libps: logs one line of C++ code in the nodes' format. */
extern "C" void ps_log(int severity, const char *file, int line, const char *msg, size_t len);

namespace dmlc {

/* One LOG(INFO|WARNING|ERROR) statement: buffers, then logs one line. */
class LogMessage {
 public:
  LogMessage(const char *file, int line, int severity = kLogInfo)
      : file_(file), line_(line), severity_(severity) {}
  ~LogMessage() {
    std::string msg = stream_.str();
    ps_log(severity_, file_, line_, msg.data(), msg.size());
  }
  std::ostream &stream() { return stream_; }

 private:
  std::ostringstream stream_;
  const char *file_;
  int line_;
  int severity_;
  LogMessage(const LogMessage &) = delete;
  void operator=(const LogMessage &) = delete;
};

/* One LOG(FATAL) statement or failed CHECK: logs, then throws (or aborts). */
class LogMessageFatal {
 public:
  LogMessageFatal(const char *file, int line) : file_(file), line_(line) {}
  std::ostringstream &stream() { return stream_; }
  // Throwing from a destructor is how the statement form
  // `LOG(FATAL) << a << b;` can raise after the message is complete.
  ~LogMessageFatal() DMLC_THROW_EXCEPTION {
    std::string msg = stream_.str();
    ps_log(kLogFatal, file_, line_, msg.data(), msg.size());
#if DMLC_LOG_FATAL_THROW
    std::ostringstream what;
    what << file_ << ':' << line_ << ": " << msg;
    throw Error(what.str());
#else
    std::abort();
#endif
  }

 private:
  std::ostringstream stream_;
  const char *file_;
  int line_;
  LogMessageFatal(const LogMessageFatal &) = delete;
  void operator=(const LogMessageFatal &) = delete;
};

/* Turns `stream << ...` into void, for use in the ?: of the macros. */
class LogMessageVoidify {
 public:
  LogMessageVoidify() {}
  void operator&(std::ostream &) {}
};

}  // namespace dmlc

#define LOG_INFO ::dmlc::LogMessage(__FILE__, __LINE__, ::dmlc::kLogInfo)
#define LOG_WARNING ::dmlc::LogMessage(__FILE__, __LINE__, ::dmlc::kLogWarning)
#define LOG_ERROR ::dmlc::LogMessage(__FILE__, __LINE__, ::dmlc::kLogError)
#define LOG_FATAL ::dmlc::LogMessageFatal(__FILE__, __LINE__)
#define LOG_QFATAL LOG_FATAL
#ifdef NDEBUG
#define LOG_DFATAL LOG_ERROR
#else
#define LOG_DFATAL LOG_FATAL
#endif

#define LOG(severity) LOG_##severity.stream()
#define LG LOG_INFO.stream()
#define LOG_IF(severity, condition) \
  !(condition) ? (void)0 : ::dmlc::LogMessageVoidify() & LOG(severity)
#define LOG_EVERY_N(severity, n) LOG(severity)
#define VLOG(x) LOG_INFO.stream()

/* Expression form (no dangling-else hazard inside if/else). */
#define CHECK(x)                                                     \
  (x) ? (void)0                                                      \
      : ::dmlc::LogMessageVoidify() &                                \
            ::dmlc::LogMessageFatal(__FILE__, __LINE__).stream()    \
                << "Check failed: " #x << ' '
#define CHECK_LT(x, y) CHECK((x) < (y))
#define CHECK_GT(x, y) CHECK((x) > (y))
#define CHECK_LE(x, y) CHECK((x) <= (y))
#define CHECK_GE(x, y) CHECK((x) >= (y))
#define CHECK_EQ(x, y) CHECK((x) == (y))
#define CHECK_NE(x, y) CHECK((x) != (y))
/* Yields x; fails if it is null. */
#define CHECK_NOTNULL(x) ::dmlc::CheckNotNull(__FILE__, __LINE__, #x, (x))

#ifdef NDEBUG
#define DCHECK(x) \
  while (false) CHECK(x)
#define DCHECK_LT(x, y) \
  while (false) CHECK((x) < (y))
#define DCHECK_GT(x, y) \
  while (false) CHECK((x) > (y))
#define DCHECK_LE(x, y) \
  while (false) CHECK((x) <= (y))
#define DCHECK_GE(x, y) \
  while (false) CHECK((x) >= (y))
#define DCHECK_EQ(x, y) \
  while (false) CHECK((x) == (y))
#define DCHECK_NE(x, y) \
  while (false) CHECK((x) != (y))
#else
#define DCHECK(x) CHECK(x)
#define DCHECK_LT(x, y) CHECK((x) < (y))
#define DCHECK_GT(x, y) CHECK((x) > (y))
#define DCHECK_LE(x, y) CHECK((x) <= (y))
#define DCHECK_GE(x, y) CHECK((x) >= (y))
#define DCHECK_EQ(x, y) CHECK((x) == (y))
#define DCHECK_NE(x, y) CHECK((x) != (y))
#endif

namespace dmlc {

template <typename T>
inline T CheckNotNull(const char *file, int line, const char *expr, T &&v) {
  if (v == nullptr) {
    LogMessageFatal(file, line).stream() << "Check notnull: " << expr;
  }
  return std::forward<T>(v);
}

}  // namespace dmlc

#endif  // DMLC_LOGGING_H_
