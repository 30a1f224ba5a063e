// The server side of push_pull: every key is summed over one round of pushes, one from each worker,
// and every worker's request is answered with the sum once the last of them arrived (BytePS's
// synchronous server). A request this module's workers never send is answered at once with its own
// values and logged, so a stray or forged message can neither stop the server nor hold a round.
#pragma once

#include <ps/ps.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "torch/element_type.hpp"

namespace pstwin::torch {

class SumServer {
 public:
  explicit SumServer(int num_workers);
  // Serves app 0 until the job ends: ps::Start, the request handle, ps::Finalize.
  static void run();

  void handle(const ps::KVMeta& meta, const ps::KVPairs<char>& data, ps::KVServer<char>* server);

 private:
  struct Round {
    ElementType type = ElementType::kFloat32;
    std::vector<char> sum;            // the pushes of this round so far
    std::vector<ps::KVMeta> waiting;  // the requests to answer with it, in arrival order
  };
  // Why a request cannot join a round; empty when it can.
  std::string refusal(const ps::KVMeta& meta, const ps::KVPairs<char>& data) const;

  int num_workers_;
  std::mutex mutex_;
  std::map<ps::Key, Round> rounds_;
};

}  // namespace pstwin::torch
