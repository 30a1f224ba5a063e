// One application message as a ps-lite app sees it: what it is (meta) and its data segments (keys,
// values, lengths for a key-value app). pstwin carries it in one frame of its own protocol.
#ifndef PS_INTERNAL_MESSAGE_H_
#define PS_INTERNAL_MESSAGE_H_

#include <string>
#include <vector>

#include "ps/sarray.h"

namespace ps {

struct Meta {
  int head = 0;          // SimpleApp's head; a key-value request's cmd
  std::string body;      // SimpleApp's body
  int app_id = 0;        // 0..65535
  int customer_id = 0;   // 0..65535
  int timestamp = 0;     // the request's, echoed by its response
  int sender = 0;        // node id, filled on receipt
  int recver = 0;        // node id (not a group)
  bool request = false;  // false: a response
  bool push = false;
  bool pull = false;
  bool simple_app = false;
  int priority = 0;
};

struct Message {
  Meta meta;
  std::vector<SArray<char>> data;
  template <typename V>
  void AddData(const SArray<V>& segment) {
    data.push_back(SArray<char>(segment));
  }
};

}  // namespace ps

#endif  // PS_INTERNAL_MESSAGE_H_
