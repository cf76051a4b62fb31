/*
 * ps::Van: the node's transport as consumers see it. The transport and the
 * control protocol live in the library; this class exposes what ps-lite
 * consumers use from it: my_node(), Send() of a data message, the van
 * timestamp, and the BytePS fork's no-op hooks.
 */
#ifndef PS_INTERNAL_VAN_H_
#define PS_INTERNAL_VAN_H_

// The standard headers ps-lite's van.h provides to its includers.
#include <atomic>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ps/base.h"
#include "ps/internal/bridge.h"
#include "ps/internal/message.h"

namespace ps {

class Postoffice;

class Van {
 public:
  Van() {}
  virtual ~Van() {}

  /* Sends a data message (control messages are the library's business);
   * returns the bytes sent, or -1 after logging the error. */
  int Send(const Message& msg) {
    if (!msg.meta.control.empty()) {
      LOG(ERROR) << "Van::Send: control messages are handled by the library; "
                 << "not sent: " << msg.DebugString();
      return -1;
    }
    if (msg.data.size() > PS_MAX_FRAMES) {
      LOG(ERROR) << "Van::Send: " << msg.data.size()
                 << " data frames; at most " << PS_MAX_FRAMES;
      return -1;
    }
    ps_message m;
    std::memset(&m, 0, sizeof(m));
    m.head = msg.meta.head;
    m.app_id = msg.meta.app_id;
    m.customer_id = msg.meta.customer_id;
    m.timestamp = msg.meta.timestamp;
    m.sender = msg.meta.sender;
    m.recver = msg.meta.recver;
    m.request = msg.meta.request;
    m.push = msg.meta.push;
    m.pull = msg.meta.pull;
    m.simple_app = msg.meta.simple_app;
    m.priority = msg.meta.priority;
    m.body = msg.meta.body.data();
    m.body_len = msg.meta.body.size();
    m.num_frames = static_cast<int>(msg.data.size());
    for (size_t i = 0; i < msg.data.size(); ++i) {
      m.frame_data[i] = msg.data[i].data();
      m.frame_size[i] = msg.data[i].size();
      m.frame_type[i] = i < msg.meta.data_type.size()
                            ? static_cast<int>(msg.meta.data_type[i])
                            : static_cast<int>(OTHER);
    }
    int bytes = 0;
    char* err = ps_van_send(&m, &bytes);
    if (err != nullptr) {
      detail::LogIfError(err, "Van::Send");
      return -1;
    }
    return bytes;
  }

  /* This node; fails (dmlc::Error) before Start has completed. */
  const Node& my_node() const {
    std::lock_guard<std::mutex> lk(mu_);
    if (!have_node_) {
      ps_node_info info;
      detail::CheckOK(ps_node_info_get(slot_, &info), "Van::my_node");
      CHECK(info.ready) << "call Start() first";
      my_node_.role = static_cast<Node::Role>(info.role);
      my_node_.id = info.id;
      my_node_.customer_id = info.customer_id;
      my_node_.hostname = info.hostname;
      my_node_.port = info.port;
      my_node_.is_recovery = info.is_recovery != 0;
      have_node_ = true;
    }
    return my_node_;
  }

  /* The next van-level timestamp (used by control messages). */
  int GetTimestamp() { return ps_node_next_timestamp(); }

  /* Whether the node is registered and connected. */
  bool IsReady() {
    ps_node_info info;
    char* err = ps_node_info_get(slot_, &info);
    if (err != nullptr) {
      ps_free(err);
      return false;
    }
    return info.ready != 0;
  }

  /* BytePS fork: the transport's name. */
  std::string GetType() const { return "zmq"; }

  /* BytePS fork: RDMA/UCX memory registration; nothing to do over zmq. */
  void PinMemory(void* /*addr*/, size_t /*length*/, bool /*gpu*/) {}

  /* BytePS fork: transport-level receive buffers (RDMA). Use
   * KVServer::RegisterRecvBufferWithRank, which works on any transport. */
  void RegisterRecvBuffer(Message& /*msg*/) {
    LOG(WARNING) << "Van::RegisterRecvBuffer has no effect with this library";
  }

 private:
  friend class Postoffice;

  /* Forgets the cached node (after Finalize; a restart registers anew). */
  void Reset() {
    std::lock_guard<std::mutex> lk(mu_);
    have_node_ = false;
  }

  int slot_ = PS_SLOT_MAIN;  // the Postoffice's node (set by Postoffice)
  mutable std::mutex mu_;
  mutable bool have_node_ = false;
  mutable Node my_node_;

  Van(const Van&) = delete;
  Van& operator=(const Van&) = delete;
};

}  // namespace ps
#endif  // PS_INTERNAL_VAN_H_
