// SimpleApp: requests and responses of an int head and a string body between any nodes.
#ifndef PS_SIMPLE_APP_H_
#define PS_SIMPLE_APP_H_

#include <functional>
#include <memory>
#include <string>

#include "ps/internal/customer.h"
#include "ps/internal/message.h"
#include "ps/internal/postoffice.h"

namespace ps {

struct SimpleData {
  int head = 0;
  std::string body;
  int sender = 0;  // node id
  int timestamp = 0;
  int customer_id = 0;  // the sender's customer
};

class SimpleApp {
 public:
  using Handle = std::function<void(const SimpleData& recved, SimpleApp* app)>;

  // `app_id` must match the remote app's; `customer_id` is unique within this process.
  // The customer starts held: a request that comes before the app set its handles (or before obj_ is
  // assigned) waits for the app's next call, not for the default handle.
  SimpleApp(int app_id, int customer_id) : SimpleApp() {
    obj_ = std::make_unique<Customer>(
        app_id, customer_id, [this](const Message& msg) { Process(msg); }, true);
  }
  // The customer goes first: its thread may be calling Process.
  virtual ~SimpleApp() { obj_.reset(); }
  SimpleApp(const SimpleApp&) = delete;
  SimpleApp& operator=(const SimpleApp&) = delete;

  // Sends a request to a node or a group (every node of it): its timestamp.
  virtual int Request(int req_head, const std::string& req_body, int recv_id) {
    obj_->Release();
    const int ts = obj_->NewRequest(recv_id);
    Message msg;
    msg.meta.head = req_head;
    msg.meta.body = req_body;
    msg.meta.timestamp = ts;
    msg.meta.request = true;
    msg.meta.simple_app = true;
    msg.meta.app_id = obj_->app_id();
    msg.meta.customer_id = obj_->customer_id();
    for (int node : Postoffice::Get()->GetNodeIDs(recv_id)) {
      msg.meta.recver = node;
      Postoffice::Get()->Send(msg);
    }
    return ts;
  }
  // Waits until every node the request went to responded.
  virtual void Wait(int timestamp) {
    obj_->Release();
    obj_->WaitRequest(timestamp);
  }
  virtual void Response(const SimpleData& recv_req, const std::string& res_body = "") {
    Message msg;
    msg.meta.head = recv_req.head;
    msg.meta.body = res_body;
    msg.meta.timestamp = recv_req.timestamp;
    msg.meta.request = false;
    msg.meta.simple_app = true;
    msg.meta.app_id = obj_->app_id();
    msg.meta.customer_id = recv_req.customer_id;
    msg.meta.recver = recv_req.sender;
    Postoffice::Get()->Send(msg);
  }
  virtual void set_request_handle(const Handle& request_handle) {
    CHECK(request_handle) << "invalid request handle";
    request_handle_ = request_handle;
    if (obj_) obj_->Release();
  }
  virtual void set_response_handle(const Handle& response_handle) {
    CHECK(response_handle) << "invalid response handle";
    response_handle_ = response_handle;
    if (obj_) obj_->Release();
  }
  virtual Customer* get_customer() { return obj_.get(); }

 protected:
  // For KVWorker and KVServer, which make their own customer.
  SimpleApp()
      : request_handle_([](const SimpleData& recved, SimpleApp* app) { app->Response(recved); }),
        response_handle_([](const SimpleData&, SimpleApp*) {}) {}

  virtual void Process(const Message& msg) {
    SimpleData recved;
    recved.sender = msg.meta.sender;
    recved.head = msg.meta.head;
    recved.body = msg.meta.body;
    recved.timestamp = msg.meta.timestamp;
    recved.customer_id = msg.meta.customer_id;
    if (msg.meta.request)
      request_handle_(recved, this);
    else
      response_handle_(recved, this);
  }

  std::unique_ptr<Customer> obj_;

 private:
  Handle request_handle_;
  Handle response_handle_;
};

}  // namespace ps

#endif  // PS_SIMPLE_APP_H_
