/*
 * ps::Postoffice: the process's node — its role, the job's node groups and
 * key ranges, start, barriers and shutdown.
 *
 * Both API generations are served: upstream's singleton Get(), and the
 * BytePS fork's Init(role) / GetServer() / GetWorker() / GetScheduler().
 * A process has one node, which all of them return, except a JOINT one
 * (DMLC_ROLE=joint or StartPS(..., JOINT, ...)): it has a server node,
 * Get() and GetServer(), and a worker node, GetWorker(), each registered
 * with the scheduler as any server and worker. With DMLC_GROUP_SIZE=n > 1
 * each of them has n instances, GetServer(i) / GetWorker(i), each a node of
 * its own with rank rank*n+i (StartPS's rank or DMLC_RANK is required).
 */
#ifndef PS_INTERNAL_POSTOFFICE_H_
#define PS_INTERNAL_POSTOFFICE_H_

#include <ctime>
#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/internal/bridge.h"
#include "ps/internal/customer.h"
#include "ps/internal/env.h"
#include "ps/internal/van.h"
#include "ps/range.h"

namespace ps {

class Postoffice {
 public:
  /* The process's Postoffice. It is never destroyed, so that objects with
   * static storage may still use it while the program exits. */
  static Postoffice* Get() {
    static Postoffice* po = new Postoffice();
    return po;
  }

  /* BytePS fork: creates the node for role (the library does that on
   * first use anyway; this fixes the role before DMLC_ROLE is read). */
  static void Init(Node::Role role) {
    Get();
    detail::CheckOK(ps_node_init(static_cast<int>(role)), "Postoffice::Init");
  }

  /* BytePS fork: instance index (0 to DMLC_GROUP_SIZE-1) of the
   * process's server node (its main node in any other process). */
  static Postoffice* GetServer(int index = 0) {
    return index == 0 ? Get() : Instance(2 * index + PS_SLOT_MAIN);
  }
  /* Instance index of a JOINT process's worker node; of the main node in
   * any other process. */
  static Postoffice* GetWorker(int index = 0) {
    if (!ps_node_is_joint()) return GetServer(index);
    return index == 0 ? JointWorker() : Instance(2 * index + PS_SLOT_WORKER);
  }
  /* BytePS fork: this process's Postoffice if it is the scheduler. */
  static Postoffice* GetScheduler() {
    Postoffice* po = Get();
    return po->is_scheduler() ? po : nullptr;
  }

  Van* van() { return &van_; }

  /* Registers customer_id with the job and waits for every node, then
   * (do_barrier) for all nodes to arrive. Throws dmlc::Error if the node
   * cannot start (configuration, address in use). */
  void Start(int customer_id, const char* /*argv0*/, const bool do_barrier) {
    StartAs(customer_id, PS_ROLE_FROM_ENV, do_barrier);
  }

  /* BytePS fork form: role overrides DMLC_ROLE (JOINT starts both of the
   * process's nodes, every instance of each); rank is the rank the process
   * asks for (-1: none, or DMLC_RANK), which the scheduler gives it or
   * refuses (taken, or beyond DMLC_NUM_*). */
  void Start(int customer_id, const Node::Role role, int rank,
             const bool do_barrier, const char* /*argv0*/) {
    CHECK_GE(rank, -1) << "preferred rank";
    preferred_rank_ = rank;
    {
      std::lock_guard<std::mutex> lk(mu_);
      have_info_ = false;  // the role may be fixed only now
    }
    detail::CheckOK(ps_node_start_rank(customer_id, static_cast<int>(role),
                                       rank, do_barrier ? 1 : 0),
                    "Start");
  }

  /* Optionally waits for all nodes; customer 0 then stops the process's
   * nodes (both of a JOINT process) and runs the exit callback. */
  void Finalize(const int customer_id, const bool do_barrier = true) {
    detail::LogIfError(ps_node_finalize(customer_id, do_barrier ? 1 : 0),
                       "Finalize");
    if (customer_id != 0) return;
    Callback cb = Get()->Reset();
    if (JointWorkerRef() != nullptr) JointWorkerRef()->Reset();
    {
      std::lock_guard<std::mutex> lk(InstancesMu());
      for (auto& kv : Instances()) kv.second->Reset();
    }
    if (cb) cb();
  }

  /* Customers register themselves; these exist for source compatibility. */
  void AddCustomer(Customer* customer) {
    detail::CustomerRegistry::Get().Add(customer->app_id(),
                                        customer->customer_id(), customer);
  }
  void RemoveCustomer(Customer* customer) {
    detail::CustomerRegistry::Get().Remove(customer->app_id(),
                                           customer->customer_id(), customer);
  }
  /* The customer (app_id, customer_id) of this process, polling up to
   * timeout seconds for it to appear; null if it does not. */
  Customer* GetCustomer(int app_id, int customer_id, int timeout = 0) const {
    for (int i = 0;; ++i) {
      Customer* c = detail::CustomerRegistry::Get().Find(app_id, customer_id);
      if (c != nullptr || i >= timeout * 1000) return c;
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
    }
  }

  /* The node ids of a group (kScheduler, kServerGroup, kWorkerGroup or a
   * union) or of a single node id: workers first, then servers, then the
   * scheduler. Fails (dmlc::Error) for an id that is neither. */
  const std::vector<int>& GetNodeIDs(int node_id) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = node_ids_.find(node_id);
    if (it != node_ids_.end()) return it->second;
    std::vector<int> ids(64);
    int count = 0;
    detail::CheckOK(ps_node_group(slot_, node_id, ids.data(),
                                  static_cast<int>(ids.size()), &count),
                    "GetNodeIDs");
    CHECK_GE(count, 0) << "node " << node_id << " doesn't exist";
    if (static_cast<size_t>(count) > ids.size()) {
      ids.resize(count);
      detail::CheckOK(ps_node_group(slot_, node_id, ids.data(), count, &count),
                      "GetNodeIDs");
    }
    ids.resize(count);
    return node_ids_.emplace(node_id, ids).first->second;
  }

  /* The key range of each server: N equal ranges of [0, kMaxKey). */
  const std::vector<Range>& GetServerKeyRanges() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!server_key_ranges_.empty()) return server_key_ranges_;
    int n = std::max(info_locked().num_servers, 1);
    std::vector<uint64_t> b(n), e(n);
    int count = 0;
    detail::CheckOK(ps_node_key_ranges(b.data(), e.data(), n, &count),
                    "GetServerKeyRanges");
    for (int i = 0; i < std::min(count, n); ++i) {
      server_key_ranges_.push_back(Range(b[i], e[i]));
    }
    return server_key_ranges_;
  }

  using Callback = std::function<void()>;
  /* Runs cb after customer 0's Finalize has stopped the node. */
  void RegisterExitCallback(const Callback& cb) {
    std::lock_guard<std::mutex> lk(mu_);
    exit_callback_ = cb;
  }

  static inline int WorkerRankToID(int rank) { return rank * 2 + 9; }
  static inline int ServerRankToID(int rank) { return rank * 2 + 8; }
  static inline int IDtoRank(int id) { return std::max((id - 8) / 2, 0); }

  // BytePS fork: instance ids within a group (DMLC_GROUP_SIZE).
  int GroupWorkerRankToInstanceID(int rank, int instance_idx) {
    return WorkerRankToID(rank * group_size() + instance_idx);
  }
  int GroupServerRankToInstanceID(int rank, int instance_idx) {
    return ServerRankToID(rank * group_size() + instance_idx);
  }
  int InstanceIDtoGroupRank(int id) { return IDtoRank(id) / group_size(); }
  int group_size() const { return ps_node_group_size(); }
  int num_worker_instances() const { return num_workers() * group_size(); }
  int num_server_instances() const { return num_servers() * group_size(); }
  int preferred_rank() const { return preferred_rank_; }

  int num_workers() const { return info().num_workers; }
  int num_servers() const { return info().num_servers; }
  /* This node's rank among its role; fails before Start. */
  int my_rank() const { return IDtoRank(van_.my_node().id); }
  int is_worker() const { return info().role == PS_ROLE_WORKER; }
  int is_server() const { return info().role == PS_ROLE_SERVER; }
  int is_scheduler() const { return info().role == PS_ROLE_SCHEDULER; }
  std::string role_str() const {
    return is_worker() ? "worker" : is_server() ? "server" : "scheduler";
  }
  int verbose() const { return info().verbose; }
  bool is_recovery() const { return van_.my_node().is_recovery; }

  /* Blocks until every node of node_group has called Barrier. */
  void Barrier(int customer_id, int node_group) {
    detail::LogIfError(ps_node_barrier(slot_, customer_id, node_group), "Barrier");
  }

  /* Control messages are handled inside the library. */
  void Manage(const Message& /*recv*/) {}
  void UpdateHeartbeat(int /*node_id*/, time_t /*t*/) {}

  /* Nodes that have not sent a heartbeat within t seconds (the scheduler
   * watches servers and workers; the others watch the scheduler). Needs
   * PS_HEARTBEAT_INTERVAL > 0 to ever report anything. */
  std::vector<int> GetDeadNodes(int t = 60) {
    std::vector<int> ids(64);
    int n = ps_node_dead_nodes(t, ids.data(), static_cast<int>(ids.size()));
    if (static_cast<size_t>(n) > ids.size()) {
      ids.resize(n);
      n = std::min(n, ps_node_dead_nodes(t, ids.data(), n));
    }
    ids.resize(std::max(n, 0));
    return ids;
  }

 private:
  explicit Postoffice(int slot = PS_SLOT_MAIN) : slot_(slot) {
    detail::EnsureCallbacks();
    van_.slot_ = slot;
  }

  /* The Postoffice of slot (an instance > 0); never destroyed. */
  static Postoffice* Instance(int slot) {
    std::lock_guard<std::mutex> lk(InstancesMu());
    Postoffice*& po = Instances()[slot];
    if (po == nullptr) po = new Postoffice(slot);
    return po;
  }
  static std::unordered_map<int, Postoffice*>& Instances() {
    static auto* m = new std::unordered_map<int, Postoffice*>();
    return *m;
  }
  static std::mutex& InstancesMu() {
    static auto* mu = new std::mutex();
    return *mu;
  }

  /* A JOINT process's worker node; never destroyed, as Get()'s. */
  static Postoffice* JointWorker() {
    static Postoffice* po = JointWorkerRef() = new Postoffice(PS_SLOT_WORKER);
    return po;
  }
  /* JointWorker(), or null before its first call. */
  static Postoffice*& JointWorkerRef() {
    static Postoffice* po = nullptr;
    return po;
  }

  /* Forgets what the stopped node said; returns the exit callback. */
  Callback Reset() {
    Callback cb;
    {
      std::lock_guard<std::mutex> lk(mu_);
      have_info_ = false;
      node_ids_.clear();
      server_key_ranges_.clear();
      cb = exit_callback_;
    }
    van_.Reset();
    return cb;
  }

  void StartAs(int customer_id, int role, bool do_barrier) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      have_info_ = false;  // the role may be fixed only now
    }
    detail::CheckOK(ps_node_start(customer_id, role, do_barrier ? 1 : 0),
                    "Start");
  }

  /* The node's static description (role, counts, verbosity). */
  ps_node_info info() const {
    std::lock_guard<std::mutex> lk(mu_);
    return info_locked();
  }
  const ps_node_info& info_locked() const {
    if (!have_info_) {
      detail::CheckOK(ps_node_info_get(slot_, &info_), "Postoffice");
      have_info_ = true;
    }
    return info_;
  }

  const int slot_;
  Van van_;
  mutable std::mutex mu_;
  mutable bool have_info_ = false;
  mutable ps_node_info info_;
  mutable std::unordered_map<int, std::vector<int>> node_ids_;
  std::vector<Range> server_key_ranges_;
  Callback exit_callback_;
  int preferred_rank_ = -1;

  Postoffice(const Postoffice&) = delete;
  Postoffice& operator=(const Postoffice&) = delete;
};

/* A log line when PS_VERBOSE >= level. */
#define PS_VLOG(x) LOG_IF(INFO, (x) <= ::ps::Postoffice::Get()->verbose())

}  // namespace ps
#endif  // PS_INTERNAL_POSTOFFICE_H_
