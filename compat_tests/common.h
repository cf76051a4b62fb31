// Helpers shared by the compatibility programs. Each program is a ps-lite
// application written against the ps-lite API only (ps/ps.h); this header
// adds a failure check that works from any thread.
#ifndef COMPAT_TESTS_COMMON_H_
#define COMPAT_TESTS_COMMON_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace compat {

// Reports a failed expectation and ends the process with status 1. It
// exits with _exit, not exit: the failure may be detected on a callback
// thread while other threads still use ps, and static destructors must not
// run under them.
class Failure {
 public:
  Failure(const char* file, int line, const char* cond) {
    ss_ << "COMPAT FAIL " << file << ':' << line << ": " << cond << ": ";
  }
  ~Failure() {
    std::string s = ss_.str() + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
    std::fflush(stderr);
    std::fflush(stdout);
    _exit(1);
  }
  std::ostream& stream() { return ss_; }

 private:
  std::ostringstream ss_;
};

inline std::string Env(const char* key, const char* def = "") {
  const char* v = std::getenv(key);
  return v == nullptr ? def : v;
}

inline int EnvInt(const char* key, int def) {
  const char* v = std::getenv(key);
  return v == nullptr || *v == '\0' ? def : std::atoi(v);
}

}  // namespace compat

// EXPECT(cond) << "details";  fails the program unless cond holds.
#define EXPECT(cond) \
  if (cond) {        \
  } else             \
    compat::Failure(__FILE__, __LINE__, #cond).stream()

#endif  // COMPAT_TESTS_COMMON_H_
