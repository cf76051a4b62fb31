/*
 * ps::Environment: configuration values that take precedence over the
 * process environment (MXNet passes DMLC_* settings this way through
 * MXInitPSEnv). Init also hands the values to the library, whose node reads
 * its configuration through the same lookup.
 */
#ifndef PS_INTERNAL_ENV_H_
#define PS_INTERNAL_ENV_H_

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ps/internal/c_api.h"

namespace ps {

class Environment {
 public:
  using Map = std::unordered_map<std::string, std::string>;

  /* The process's instance. */
  static inline Environment* Get() { return _GetSharedRef(nullptr).get(); }

  /* The instance as a shared pointer (ps-lite keeps it alive this way). */
  static inline std::shared_ptr<Environment> _GetSharedRef() {
    return _GetSharedRef(nullptr);
  }

  /* Replaces the overriding values with envs. Call before starting ps. */
  static inline Environment* Init(const Map& envs) {
    Environment* env = _GetSharedRef(&envs).get();
    env->Set(envs);
    return env;
  }

  /* The value of k: from Init if given there, else getenv(k), else null.
   * The pointer stays valid until the next Init. */
  const char* find(const char* k) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = kvs_.find(k);
      if (it != kvs_.end()) return it->second.c_str();
    }
    return getenv(k);
  }

 private:
  explicit Environment(const Map* envs) {
    if (envs != nullptr) Set(*envs);
  }

  void Set(const Map& envs) {
    std::lock_guard<std::mutex> lk(mu_);
    kvs_ = envs;
    ps_env_clear();
    for (const auto& kv : kvs_) ps_env_set(kv.first.c_str(), kv.second.c_str());
  }

  static std::shared_ptr<Environment> _GetSharedRef(const Map* envs) {
    static std::shared_ptr<Environment> inst(new Environment(envs));
    return inst;
  }

  std::mutex mu_;
  Map kvs_;
};

}  // namespace ps
#endif  // PS_INTERNAL_ENV_H_
