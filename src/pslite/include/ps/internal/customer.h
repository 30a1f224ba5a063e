// A Customer is one app's end of the messaging (ps-lite's Customer): it numbers this app's requests,
// counts their responses, and hands every message for (app_id, customer_id) to the app's handle, one
// at a time and in arrival order, on a thread of its own (so a handle may take its time, or call
// Wait, without holding up the node).
#ifndef PS_INTERNAL_CUSTOMER_H_
#define PS_INTERNAL_CUSTOMER_H_

#include <functional>
#include <memory>

#include "ps/internal/message.h"

namespace ps {

class Customer {
 public:
  using RecvHandle = std::function<void(const Message& recved)>;
  // Registers with this process's node: messages for it that came early are handed over now, or, when
  // `held`, once Release is called (by the app, or by Finalize or Barrier at the latest).
  Customer(int app_id, int customer_id, const RecvHandle& recv_handle, bool held = false);
  ~Customer();
  Customer(const Customer&) = delete;
  Customer& operator=(const Customer&) = delete;

  int app_id() const { return app_id_; }
  int customer_id() const { return customer_id_; }
  // A new request to `recver` (a node or a group): its timestamp. It is finished once every node of
  // `recver` answered (or AddResponse counted them).
  int NewRequest(int recver);
  void WaitRequest(int timestamp);
  int NumResponse(int timestamp);
  void AddResponse(int timestamp, int num = 1);

  // Called by the node for every message addressed to this customer (any thread).
  void Accept(const Message& recved);
  // Blocks until every accepted message has been handled.
  void WaitIdle();
  // Starts handing messages to the handle (a pstwin extension; a no-op unless constructed held).
  void Release();

 private:
  struct State;
  const int app_id_;
  const int customer_id_;
  std::unique_ptr<State> state_;
};

}  // namespace ps

#endif  // PS_INTERNAL_CUSTOMER_H_
