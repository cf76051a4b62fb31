/*
 * ps::Customer: one (app id, customer id) endpoint of this process. It
 * receives the messages addressed to it, one at a time, on a thread of the
 * library, and tracks outstanding requests by timestamp.
 *
 * SimpleApp, KVWorker and KVServer each own one (get_customer()); code that
 * builds its own application on raw messages constructs one with a
 * RecvHandle and sends with Postoffice::Get()->van()->Send.
 */
#ifndef PS_INTERNAL_CUSTOMER_H_
#define PS_INTERNAL_CUSTOMER_H_

// The standard headers ps-lite's customer.h provides to its includers.
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ps/internal/bridge.h"
#include "ps/internal/message.h"

namespace ps {

class Postoffice;
class Customer;

namespace detail {

/* Customers of this process by (app id, customer id), for
 * Postoffice::GetCustomer. */
struct CustomerRegistry {
  std::mutex mu;
  std::map<std::pair<int, int>, Customer*> customers;

  static CustomerRegistry& Get() {
    static CustomerRegistry* r = new CustomerRegistry();  // never destroyed
    return *r;
  }
  void Add(int app_id, int customer_id, Customer* c) {
    std::lock_guard<std::mutex> lk(mu);
    customers[std::make_pair(app_id, customer_id)] = c;
  }
  void Remove(int app_id, int customer_id, Customer* c) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = customers.find(std::make_pair(app_id, customer_id));
    if (it != customers.end() && it->second == c) customers.erase(it);
  }
  Customer* Find(int app_id, int customer_id) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = customers.find(std::make_pair(app_id, customer_id));
    return it == customers.end() ? nullptr : it->second;
  }
};

/* Tag of the constructor that adopts an app created by SimpleApp,
 * KVWorker or KVServer. */
struct AdoptApp {};

}  // namespace detail

class Customer : private detail::MessageReceiver {
 public:
  using RecvHandle = std::function<void(const Message& recved)>;

  /* A raw customer: recv_handle gets every message for (app_id,
   * customer_id). On servers and the scheduler, data messages are delivered
   * to customer id == app id. */
  Customer(int app_id, int customer_id, const RecvHandle& recv_handle)
      : app_id_(app_id), customer_id_(customer_id), recv_handle_(recv_handle) {
    detail::EnsureCallbacks();
    detail::CheckOK(
        ps_app_new_customer(app_id, customer_id,
                            static_cast<detail::MessageReceiver*>(this),
                            &handle_),
        "Customer");
    detail::CustomerRegistry::Get().Add(app_id_, customer_id_, this);
  }

  /* BytePS fork form; there is one Postoffice per process here. */
  Customer(int app_id, int customer_id, const RecvHandle& recv_handle,
           Postoffice* /*postoffice*/)
      : Customer(app_id, customer_id, recv_handle) {}

  /* Internal: the customer of a SimpleApp / KVWorker / KVServer, whose app
   * the library already created under handle. */
  Customer(detail::AdoptApp, int app_id, int customer_id, uint64_t handle)
      : app_id_(app_id), customer_id_(customer_id), handle_(handle) {
    detail::CustomerRegistry::Get().Add(app_id_, customer_id_, this);
  }

  /* Unregisters; returns once no handler of this customer runs any more. */
  virtual ~Customer() {
    detail::CustomerRegistry::Get().Remove(app_id_, customer_id_, this);
    ps_app_close(handle_);
  }

  int app_id() const { return app_id_; }
  int customer_id() const { return customer_id_; }

  /* Starts tracking a request sent to every node of group recver (a group
   * or a node id); returns its timestamp. */
  int NewRequest(int recver) { return ps_app_new_request(handle_, recver); }

  /* Blocks until request timestamp has all its responses and their
   * handlers have run. */
  void WaitRequest(int timestamp) {
    detail::LogIfError(ps_app_wait(handle_, timestamp), "Wait");
  }

  /* Responses received so far for timestamp (-1 once it completed). */
  int NumResponse(int timestamp) {
    return ps_app_num_response(handle_, timestamp);
  }

  /* Counts num responses for timestamp (for requests whose responses do
   * not all arrive as messages). */
  void AddResponse(int timestamp, int num = 1) {
    ps_app_add_response(handle_, timestamp, num);
  }

  /* Handles recved now, on the calling thread. */
  void Accept(const Message& recved) {
    if (recv_handle_) recv_handle_(recved);
  }

  /* Internal: the library's handle of this customer's app. */
  uint64_t bridge_handle() const { return handle_; }

 private:
  void ReceiveMessage(const ps_message& m) override {
    Message msg;
    msg.meta.head = m.head;
    msg.meta.app_id = m.app_id;
    msg.meta.customer_id = m.customer_id;
    msg.meta.timestamp = m.timestamp;
    msg.meta.sender = m.sender;
    msg.meta.recver = m.recver;
    msg.meta.request = m.request != 0;
    msg.meta.push = m.push != 0;
    msg.meta.pull = m.pull != 0;
    msg.meta.simple_app = m.simple_app != 0;
    msg.meta.priority = m.priority;
    if (m.body_len > 0) msg.meta.body.assign(m.body, m.body_len);
    for (int i = 0; i < m.num_frames; ++i) {
      // The frames are the library's memory, valid during the call only:
      // copy each into memory the handler may keep.
      size_t n = m.frame_size[i];
      SArray<char> frame;
      if (n > 0) {
        frame.CopyFrom(static_cast<const char*>(m.frame_data[i]), n);
      }
      msg.meta.data_type.push_back(static_cast<DataType>(m.frame_type[i]));
      msg.meta.data_size += static_cast<int>(n);
      msg.data.push_back(frame);
    }
    if (recv_handle_) recv_handle_(msg);
  }

  int app_id_;
  int customer_id_;
  RecvHandle recv_handle_;
  uint64_t handle_ = 0;

  Customer(const Customer&) = delete;
  Customer& operator=(const Customer&) = delete;
};

}  // namespace ps
#endif  // PS_INTERNAL_CUSTOMER_H_
