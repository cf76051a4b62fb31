/*
 * Glue between the C++ classes and the C ABI (c_api.h): error conversion,
 * the interfaces the library's callbacks are dispatched to, and the
 * callback table. Not part of ps-lite's API.
 *
 * Each callback receives an opaque context that is a pointer to one of the
 * interfaces below, implemented by SimpleApp, KVServer, the KVWorker
 * operation objects and Customer. Callbacks run on threads of the library;
 * an exception escaping the consumer's code there is fatal (logged, then
 * abort), as an uncaught exception in ps-lite's own threads is.
 */
#ifndef PS_INTERNAL_BRIDGE_H_
#define PS_INTERNAL_BRIDGE_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "dmlc/logging.h"
#include "ps/internal/c_api.h"

namespace ps {
namespace detail {

/* Takes ownership of an error returned by the library ("" for none). */
inline std::string TakeError(char* err) {
  if (err == nullptr) return std::string();
  std::string s(err);
  ps_free(err);
  return s;
}

/* Throws dmlc::Error (like a failed CHECK) if the library reported an
 * error: for misuse and configuration errors, where ps-lite CHECK-fails. */
inline void CheckOK(char* err, const char* what) {
  if (err != nullptr) {
    std::string msg = TakeError(err);
    LOG(FATAL) << what << ": " << msg;
  }
}

/* Logs an error from the library and carries on: for failures ps-lite
 * would not notice (a message that could not be sent). */
inline void LogIfError(char* err, const char* what) {
  if (err != nullptr) {
    std::string msg = TakeError(err);
    LOG(ERROR) << what << ": " << msg;
  }
}

/* Receives SimpleApp requests and responses (SimpleApp). */
class SimpleReceiver {
 public:
  virtual void ReceiveSimple(bool request, int head, const char* body,
                             size_t body_len, int sender, int timestamp,
                             int customer_id) = 0;

 protected:
  ~SimpleReceiver() {}
};

/* The buffers of a KV request that the library handed over: they stay
 * valid until the last HeldBuffers reference goes, which gives them back. */
class HeldBuffers {
 public:
  explicit HeldBuffers(uint64_t release) : release_(release) {}
  ~HeldBuffers() { ps_release(release_); }

 private:
  uint64_t release_;
  HeldBuffers(const HeldBuffers&) = delete;
  HeldBuffers& operator=(const HeldBuffers&) = delete;
};

/* Receives KV requests (KVServer). The buffers are valid during the call;
 * if held is set, for as long as held (or a copy of it) lives. */
class KVRequestReceiver {
 public:
  virtual void ReceiveKVRequest(const ps_kv_meta& meta, const uint64_t* keys,
                                size_t num_keys, const void* vals,
                                size_t vals_bytes, const int* lens,
                                size_t num_lens,
                                const std::shared_ptr<HeldBuffers>& held) = 0;
  /* Elastic hand-over (on_kv_export / on_kv_import): throw to fail. */
  virtual std::string ExportState(uint64_t begin, uint64_t end) = 0;
  virtual void ImportState(const char* state, size_t len) = 0;

 protected:
  ~KVRequestReceiver() {}
};

/* A malloc'd, NUL-terminated copy of s[0, n), for errors and buffers
 * handed to the library (which frees them). */
inline char* MallocCopy(const char* s, size_t n) {
  char* p = static_cast<char*>(std::malloc(n + 1));
  if (p == nullptr) return nullptr;
  if (n > 0) std::memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

/* Runs f, turning an exception into a malloc'd error message: the
 * migration callbacks report failures to the library (which aborts the
 * move) instead of letting them cross into Go. */
template <typename F>
inline char* CatchToError(const char* what, F f) {
  std::string msg;
  try {
    f();
    return nullptr;
  } catch (const std::exception& e) {
    msg = std::string(what) + " threw: " + e.what();
  } catch (...) {
    msg = std::string(what) + " threw an exception that is not a std::exception";
  }
  return MallocCopy(msg.data(), msg.size());
}

/* One KVWorker operation awaiting completion. Done is called exactly once;
 * the object is deleted right after. */
class KVOp {
 public:
  virtual ~KVOp() {}
  virtual void Done(int status, const std::string& err, const void* vals,
                    size_t vals_bytes, const int* lens, size_t num_lens) = 0;
};

/* Receives raw messages (Customer with a RecvHandle). */
class MessageReceiver {
 public:
  virtual void ReceiveMessage(const ps_message& msg) = 0;

 protected:
  ~MessageReceiver() {}
};

inline void DieInCallback(const char* where, const char* what) {
  std::fprintf(stderr,
               "elasticps: uncaught exception in %s (a ps-lite callback or "
               "handler): %s\naborting, as ps-lite does for an uncaught "
               "exception in its threads\n",
               where, what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail
}  // namespace ps

// The callbacks have C linkage, as the function pointer types of
// ps_callbacks require; they are inline so that every translation unit may
// define them.
extern "C" {

inline void ps_cxx_on_simple(void* app, int is_request, int head,
                             ps_cchar* body, size_t body_len, int sender,
                             int timestamp, int customer_id) {
  try {
    static_cast<ps::detail::SimpleReceiver*>(app)->ReceiveSimple(
        is_request != 0, head, body, body_len, sender, timestamp,
        customer_id);
  } catch (const std::exception& e) {
    ps::detail::DieInCallback("a SimpleApp handler", e.what());
  } catch (...) {
    ps::detail::DieInCallback("a SimpleApp handler", "unknown exception");
  }
}

inline void ps_cxx_on_kv_request(void* server, const ps_kv_meta* meta,
                                 ps_ckey* keys, size_t num_keys,
                                 ps_cvoid* vals, size_t vals_bytes,
                                 ps_cint* lens, size_t num_lens,
                                 uint64_t release) {
  try {
    std::shared_ptr<ps::detail::HeldBuffers> held;
    if (release != 0) held = std::make_shared<ps::detail::HeldBuffers>(release);
    static_cast<ps::detail::KVRequestReceiver*>(server)->ReceiveKVRequest(
        *meta, keys, num_keys, vals, vals_bytes, lens, num_lens, held);
  } catch (const std::exception& e) {
    ps::detail::DieInCallback("a KVServer request handler", e.what());
  } catch (...) {
    ps::detail::DieInCallback("a KVServer request handler",
                              "unknown exception");
  }
}

inline void ps_cxx_on_kv_done(void* ctx, int status, ps_cchar* err,
                              size_t err_len, ps_cvoid* vals,
                              size_t vals_bytes, ps_cint* lens,
                              size_t num_lens) {
  ps::detail::KVOp* op = static_cast<ps::detail::KVOp*>(ctx);
  try {
    op->Done(status, err == nullptr ? std::string() : std::string(err, err_len),
             vals, vals_bytes, lens, num_lens);
  } catch (const std::exception& e) {
    ps::detail::DieInCallback("a KVWorker callback", e.what());
  } catch (...) {
    ps::detail::DieInCallback("a KVWorker callback", "unknown exception");
  }
  delete op;
}

inline char* ps_cxx_on_kv_export(void* server, uint64_t begin, uint64_t end,
                                 void** state, size_t* state_len) {
  *state = nullptr;
  *state_len = 0;
  return ps::detail::CatchToError("the KVServer's export handle", [&] {
    std::string s = static_cast<ps::detail::KVRequestReceiver*>(server)
                        ->ExportState(begin, end);
    if (s.empty()) return;
    char* p = ps::detail::MallocCopy(s.data(), s.size());
    if (p == nullptr) throw std::bad_alloc();
    *state = p;
    *state_len = s.size();
  });
}

inline char* ps_cxx_on_kv_import(void* server, ps_cvoid* state,
                                 size_t state_len) {
  return ps::detail::CatchToError("the KVServer's import handle", [&] {
    static_cast<ps::detail::KVRequestReceiver*>(server)->ImportState(
        static_cast<const char*>(state), state_len);
  });
}

inline void ps_cxx_on_message(void* customer, const ps_message* msg) {
  try {
    static_cast<ps::detail::MessageReceiver*>(customer)->ReceiveMessage(*msg);
  } catch (const std::exception& e) {
    ps::detail::DieInCallback("a Customer receive handle", e.what());
  } catch (...) {
    ps::detail::DieInCallback("a Customer receive handle",
                              "unknown exception");
  }
}

}  // extern "C"

namespace ps {
namespace detail {

inline bool RegisterCallbacks() {
  ps_callbacks cb;
  cb.size = sizeof(cb);
  cb.on_simple = &ps_cxx_on_simple;
  cb.on_kv_request = &ps_cxx_on_kv_request;
  cb.on_kv_done = &ps_cxx_on_kv_done;
  cb.on_message = &ps_cxx_on_message;
  cb.on_kv_export = &ps_cxx_on_kv_export;
  cb.on_kv_import = &ps_cxx_on_kv_import;
  ps_register_callbacks(&cb);
  return true;
}

/* Installs the callbacks once per process, before the first app. */
inline void EnsureCallbacks() {
  static const bool registered = RegisterCallbacks();
  (void)registered;
}

}  // namespace detail
}  // namespace ps

#endif  // PS_INTERNAL_BRIDGE_H_
