/*
 * The ps-lite message model: data types, Node, Control, Meta and Message,
 * with the fields of both API generations (upstream dmlc and the BytePS
 * fork). Consumers mostly see these through KVMeta and SimpleData; they are
 * complete here for code that builds messages itself (ps::Van::Send,
 * ps::Customer).
 */
#ifndef PS_INTERNAL_MESSAGE_H_
#define PS_INTERNAL_MESSAGE_H_

#include <array>
#include <climits>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ps/sarray.h"

namespace ps {

/* Type tag of a data frame; on the wire as its number. */
enum DataType {
  CHAR,
  INT8,
  INT16,
  INT32,
  INT64,
  UINT8,
  UINT16,
  UINT32,
  UINT64,
  FLOAT,
  DOUBLE,
  OTHER
};

static const char* const DataTypeName[] = {
    "CHAR",   "INT8",   "INT16", "INT32",  "INT64", "UINT8",
    "UINT16", "UINT32", "UINT64", "FLOAT", "DOUBLE", "OTHER"};

/* True if V (ignoring const/volatile) is W. */
template <typename V, typename W>
inline bool SameType() {
  return std::is_same<typename std::remove_cv<V>::type, W>::value;
}

/* The tag of element type V. Only the fixed-width integer types, float and
 * double have their own tag; everything else, including plain char (which
 * is neither int8_t nor uint8_t), is OTHER. */
template <typename V>
DataType GetDataType() {
  if (SameType<V, int8_t>()) return INT8;
  if (SameType<V, int16_t>()) return INT16;
  if (SameType<V, int32_t>()) return INT32;
  if (SameType<V, int64_t>()) return INT64;
  if (SameType<V, uint8_t>()) return UINT8;
  if (SameType<V, uint16_t>()) return UINT16;
  if (SameType<V, uint32_t>()) return UINT32;
  if (SameType<V, uint64_t>()) return UINT64;
  if (SameType<V, float>()) return FLOAT;
  if (SameType<V, double>()) return DOUBLE;
  return OTHER;
}

/* A process endpoint. */
struct Node {
  /* The value of an unset id or port (INT_MAX, as upstream ps-lite). */
  static const int kEmpty = INT_MAX;

  enum Role { SERVER, WORKER, SCHEDULER, JOINT };

  Node() : role(SERVER), id(kEmpty), customer_id(0), port(kEmpty), is_recovery(false) {}

  std::string DebugString() const {
    std::stringstream ss;
    ss << "role=" << RoleName();
    if (id != kEmpty) ss << ", id=" << id;
    ss << ", ip=" << hostname << ", port=" << port
       << ", is_recovery=" << is_recovery;
    return ss.str();
  }

  std::string ShortDebugString() const {
    std::string s = role == SERVER ? "S" : role == WORKER ? "W"
                                       : role == SCHEDULER ? "H" : "J";
    if (id != kEmpty) s += "[" + std::to_string(id) + "]";
    return s;
  }

  Role role;
  int id;
  int customer_id;
  std::string hostname;
  int port;
  bool is_recovery;

  // BytePS fork: multi-port / multi-device endpoints and fabric addresses.
  // Carried for source compatibility; this library uses one port per node.
  int num_ports = 1;
  std::array<int, 32> ports{};
  std::array<int, 32> dev_types{};
  std::array<int, 32> dev_ids{};
  char endpoint_name[64] = {};
  size_t endpoint_name_len = 0;
  int aux_id = -1;

 private:
  const char* RoleName() const {
    switch (role) {
      case SERVER: return "server";
      case WORKER: return "worker";
      case SCHEDULER: return "scheduler";
      default: return "joint";
    }
  }
};

/* The control part of a message (registration, barriers, ...). */
struct Control {
  enum Command {
    EMPTY,
    TERMINATE,
    ADD_NODE,
    BARRIER,
    ACK,
    HEARTBEAT,
    BOOTSTRAP,         // BytePS fork
    ADDR_REQUEST,      // BytePS fork
    ADDR_RESOLVED,     // BytePS fork
    INSTANCE_BARRIER,  // BytePS fork
  };

  Control() : cmd(EMPTY), barrier_group(0), msg_sig(0) {}

  bool empty() const { return cmd == EMPTY; }

  std::string DebugString() const {
    static const char* const names[] = {
        "EMPTY",     "TERMINATE",    "ADD_NODE",      "BARRIER",
        "ACK",       "HEARTBEAT",    "BOOTSTRAP",     "ADDR_REQUEST",
        "ADDR_RESOLVED", "INSTANCE_BARRIER"};
    if (empty()) return "";
    std::stringstream ss;
    ss << "cmd=" << names[cmd];
    if (!node.empty()) {
      ss << ", node={";
      for (const Node& n : node) ss << ' ' << n.DebugString();
      ss << " }";
    }
    if (cmd == BARRIER || cmd == INSTANCE_BARRIER)
      ss << ", barrier_group=" << barrier_group;
    if (cmd == ACK) ss << ", msg_sig=" << msg_sig;
    return ss.str();
  }

  Command cmd;
  std::vector<Node> node;
  int barrier_group;
  uint64_t msg_sig;
};

/* A message header. */
struct Meta {
  /* The value of an unset field (INT_MAX, as upstream ps-lite). */
  static const int kEmpty = INT_MAX;

  Meta()
      : head(kEmpty),
        app_id(kEmpty),
        customer_id(kEmpty),
        timestamp(kEmpty),
        sender(kEmpty),
        recver(kEmpty),
        request(false),
        push(false),
        pull(false),
        simple_app(false) {}

  std::string DebugString() const {
    std::stringstream ss;
    if (sender == kEmpty) {
      ss << '?';
    } else {
      ss << sender;
    }
    ss << " => " << recver << ". Meta: request=" << request;
    if (timestamp != kEmpty) ss << ", timestamp=" << timestamp;
    if (!control.empty()) {
      ss << ", control={ " << control.DebugString() << " }";
    } else {
      ss << ", app_id=" << app_id << ", customer_id=" << customer_id
         << ", simple_app=" << simple_app << ", push=" << push
         << ", pull=" << pull;
    }
    if (head != kEmpty) ss << ", head=" << head;
    if (!body.empty()) ss << ", body=" << body;
    if (!data_type.empty()) {
      ss << ", data_type={";
      for (DataType d : data_type) ss << ' ' << DataTypeName[d];
      ss << " }";
    }
    return ss.str();
  }

  int head;        // KV: the request's cmd; SimpleApp: the request head
  int app_id;
  int customer_id;
  int timestamp;   // the requesting customer's request number
  int sender;
  int recver;
  bool request;
  bool push;
  bool pull;
  bool simple_app;
  std::string body;
  std::vector<DataType> data_type;
  Control control;
  int data_size = 0;
  int priority = 0;

  // BytePS fork extensions; not carried by this library's wire format.
  DeviceType src_dev_type = UNK;
  int src_dev_id = -1;
  DeviceType dst_dev_type = UNK;
  int dst_dev_id = -1;
  uint64_t key = 0;
  uint64_t addr = 0;
  int val_len = 0;
  int option = 0;
  int sid = 0;
};

/* A header plus data frames (for KV traffic: keys, vals, optional lens). */
struct Message {
  Meta meta;
  std::vector<SArray<char>> data;

  /* Appends val as the next frame, tagged with V's type. */
  template <typename V>
  void AddData(const SArray<V>& val) {
    CHECK_EQ(data.size(), meta.data_type.size());
    meta.data_type.push_back(GetDataType<V>());
    SArray<char> bytes(val);
    meta.data_size += static_cast<int>(bytes.size());
    data.push_back(bytes);
    if (data.size() == 2) {
      // The values frame's placement describes the message (BytePS fork).
      meta.src_dev_type = val.src_device_type_;
      meta.src_dev_id = val.src_device_id_;
      meta.dst_dev_type = val.dst_device_type_;
      meta.dst_dev_id = val.dst_device_id_;
    }
  }

  std::string DebugString() const {
    std::stringstream ss;
    ss << meta.DebugString();
    if (!data.empty()) {
      ss << " Body:";
      for (const auto& d : data) ss << " data_size=" << d.size();
    }
    return ss.str();
  }
};

}  // namespace ps
#endif  // PS_INTERNAL_MESSAGE_H_
