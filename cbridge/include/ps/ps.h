/*
 * The ps-lite API, as implemented by the elasticps bridge (libps.a /
 * libps.so). Include this header and link the library; see README.md in the
 * bridge's directory.
 *
 * Both generations of the API are available: upstream dmlc/ps-lite (MXNet,
 * BytePS <= 0.2.5) with Start / StartAsync / Finalize(customer_id, barrier),
 * and the BytePS fork with StartPS / Finalize(customer_id, role, barrier) /
 * GetRole.
 */
#ifndef PS_PS_H_
#define PS_PS_H_

#include <functional>
#include <string>

#include "ps/base.h"
#include "ps/kv_app.h"
#include "ps/simple_app.h"

namespace ps {

/* The number of worker nodes (registrations) in the job. */
inline int NumWorkers() { return Postoffice::Get()->num_workers(); }
/* The number of server nodes in the job. */
inline int NumServers() { return Postoffice::Get()->num_servers(); }
inline bool IsWorker() { return Postoffice::Get()->is_worker(); }
inline bool IsServer() { return Postoffice::Get()->is_server(); }
inline bool IsScheduler() { return Postoffice::Get()->is_scheduler(); }
/* This node's rank among the nodes of its role (0-based); after Start. */
inline int MyRank() {
  return Postoffice::Get()->my_rank() / Postoffice::Get()->group_size();
}

/* Registers customer_id of this process with the job, waits until every
 * node has registered, then waits on a barrier of all nodes. The node's
 * role and the job come from DMLC_* environment variables (or
 * Environment::Init). */
inline void Start(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, true);
}

/* Start without the final barrier. */
inline void StartAsync(int customer_id, const char* argv0 = nullptr) {
  Postoffice::Get()->Start(customer_id, argv0, false);
}

/* Optionally waits on a barrier of all nodes; for customer 0 the node then
 * shuts down and the exit callback runs. */
inline void Finalize(int customer_id, const bool do_barrier = true) {
  Postoffice::Get()->Finalize(customer_id, do_barrier);
}

/* Runs cb when customer 0 finalizes (e.g. to delete a KVServer). */
inline void RegisterExitCallback(const std::function<void()>& cb) {
  Postoffice::Get()->RegisterExitCallback(cb);
}

/* BytePS fork: the role named role_str ("worker", "server", "scheduler",
 * "joint"). */
inline Node::Role GetRole(const std::string role_str) {
  if (role_str == "worker") return Node::WORKER;
  if (role_str == "server") return Node::SERVER;
  if (role_str == "scheduler") return Node::SCHEDULER;
  if (role_str == "joint") return Node::JOINT;
  LOG(FATAL) << "Unexpected role: " << role_str;
  return Node::SCHEDULER;
}

/* BytePS fork: Start as role (which overrides DMLC_ROLE); JOINT starts a
 * server node and a worker node (Postoffice::GetServer / GetWorker). rank
 * is the rank the process asks for (-1: none, or DMLC_RANK); with
 * DMLC_GROUP_SIZE=n > 1 (which needs a rank) every role but the scheduler
 * starts n instances, instance i with rank rank*n+i. After Finalize the
 * process may StartPS again, with other DMLC_NUM_* values (BytePS's
 * suspend/resume). */
inline void StartPS(int customer_id, Node::Role role, int rank,
                    bool do_barrier, const char* argv0 = nullptr) {
  Postoffice::Init(role);
  Postoffice::Get()->Start(customer_id, role, rank, do_barrier, argv0);
}

/* BytePS fork: Finalize of the node(s) started as role. */
inline void Finalize(int customer_id, Node::Role role,
                     const bool do_barrier = true) {
  (void)role;
  Postoffice::Get()->Finalize(customer_id, do_barrier);
}

}  // namespace ps
#endif  // PS_PS_H_
