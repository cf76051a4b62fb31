/*
 * ps::SimpleApp: requests of (int head, string body) to groups of nodes,
 * and their responses. KVWorker and KVServer are SimpleApps too, which is
 * how MXNet sends commands to its servers.
 */
#ifndef PS_SIMPLE_APP_H_
#define PS_SIMPLE_APP_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "ps/internal/bridge.h"
#include "ps/internal/message.h"
#include "ps/internal/postoffice.h"

namespace ps {

/* A request or response as a handler sees it. */
struct SimpleData {
  int head;
  std::string body;
  int sender;       // node id of the sender
  int timestamp;    // the requester's timestamp
  int customer_id;  // the requester's customer id
};

class SimpleApp : private detail::SimpleReceiver {
 public:
  /* Registers customer (app_id, customer_id). On servers and the
   * scheduler, requests are delivered to customer id == app id. The
   * postoffice argument (BytePS fork) is ignored: one per process. */
  explicit SimpleApp(int app_id, int customer_id,
                     Postoffice* postoffice = nullptr)
      : SimpleApp() {
    postoffice_ = postoffice != nullptr ? postoffice : postoffice_;
    uint64_t handle = 0;
    detail::CheckOK(
        ps_app_new_simple(app_id, customer_id, simple_receiver(), &handle),
        "SimpleApp");
    obj_ = new Customer(detail::AdoptApp(), app_id, customer_id, handle);
  }

  /* Unregisters; no handler runs after this returns. */
  virtual ~SimpleApp() {
    delete obj_;
    obj_ = nullptr;
  }

  /* Sends (req_head, req_body) to every node of group recv_id (may
   * include this node) and returns the request's timestamp for Wait. */
  virtual int Request(int req_head, const std::string& req_body,
                      int recv_id) {
    int ts = -1;
    char* err = ps_simple_request(obj_->bridge_handle(), req_head,
                                  req_body.data(), req_body.size(), recv_id,
                                  &ts);
    if (ts < 0) {
      detail::CheckOK(err, "SimpleApp::Request");
    } else {
      detail::LogIfError(err, "SimpleApp::Request");
    }
    return ts;
  }

  /* Blocks until every node has answered request timestamp and the
   * response handler has run for each answer. */
  virtual void Wait(int timestamp) { obj_->WaitRequest(timestamp); }

  /* Answers recv_req with res_body; may be called later, from any thread,
   * once per request. */
  virtual void Response(const SimpleData& recv_req,
                        const std::string& res_body = "") {
    detail::LogIfError(
        ps_simple_response(obj_->bridge_handle(), recv_req.head,
                           res_body.data(), res_body.size(), recv_req.sender,
                           recv_req.timestamp, recv_req.customer_id),
        "SimpleApp::Response");
  }

  using Handle = std::function<void(const SimpleData& recved, SimpleApp* app)>;

  /* The request handler; the default answers with an empty body. */
  virtual void set_request_handle(const Handle& request_handle) {
    CHECK(request_handle) << "invalid request handle";
    std::lock_guard<std::mutex> lk(handle_mu_);
    request_handle_ = request_handle;
    request_handle_set_ = true;
    handle_cv_.notify_all();
  }

  /* The response handler; the default ignores responses. */
  virtual void set_response_handle(const Handle& response_handle) {
    CHECK(response_handle) << "invalid response handle";
    std::lock_guard<std::mutex> lk(handle_mu_);
    response_handle_ = response_handle;
  }

  virtual Customer* get_customer() { return obj_; }

 protected:
  /* For subclasses, which create the customer themselves. */
  SimpleApp()
      : obj_(nullptr),
        postoffice_(Postoffice::Get()),
        created_(std::chrono::steady_clock::now()) {
    detail::EnsureCallbacks();
    request_handle_ = [](const SimpleData& recved, SimpleApp* app) {
      app->Response(recved);
    };
    response_handle_ = [](const SimpleData&, SimpleApp*) {};
  }

  /* Handles a simple_app message given as a raw Message. */
  virtual void Process(const Message& msg) {
    Dispatch(msg.meta.request, msg.meta.head, msg.meta.body, msg.meta.sender,
             msg.meta.timestamp, msg.meta.customer_id, false);
  }

  /* The context the library passes back to on_simple for this app. */
  void* simple_receiver() {
    return static_cast<detail::SimpleReceiver*>(this);
  }

  Customer* obj_;
  Postoffice* postoffice_;  // BytePS fork: the Postoffice of this app

 private:
  // Requests may be delivered as soon as the app is registered: those that
  // arrived before it existed are handed over at once, typically before
  // the constructing thread has called set_request_handle. So a request
  // arriving in the first HandleGrace() of the app's life waits for the
  // handler to be set rather than going to the default one. ps-lite has
  // the same window, kept narrow there by its 1 ms polling for customers.
  static std::chrono::milliseconds HandleGrace() {
    return std::chrono::milliseconds(1000);
  }

  void ReceiveSimple(bool request, int head, const char* body,
                     size_t body_len, int sender, int timestamp,
                     int customer_id) override {
    Dispatch(request, head, std::string(body == nullptr ? "" : body, body_len),
             sender, timestamp, customer_id, true);
  }

  void Dispatch(bool request, int head, const std::string& body, int sender,
                int timestamp, int customer_id, bool grace) {
    SimpleData d;
    d.head = head;
    d.body = body;
    d.sender = sender;
    d.timestamp = timestamp;
    d.customer_id = customer_id;
    Handle h;
    {
      std::unique_lock<std::mutex> lk(handle_mu_);
      if (request && grace && !request_handle_set_) {
        handle_cv_.wait_until(
            lk, created_ + HandleGrace(),
            [this] { return request_handle_set_; });
      }
      h = request ? request_handle_ : response_handle_;
    }
    h(d, this);
  }

  std::mutex handle_mu_;
  std::condition_variable handle_cv_;
  Handle request_handle_;
  Handle response_handle_;
  bool request_handle_set_ = false;
  std::chrono::steady_clock::time_point created_;
};

}  // namespace ps
#endif  // PS_SIMPLE_APP_H_
