#include "realnet/van.hpp"

#include "realnet/epoll_runtime.hpp"
#include "realnet/ucx_runtime.hpp"
#include "realnet/zmq_runtime.hpp"

namespace pstwin::realnet {

std::unique_ptr<LoopRuntime> make_node_runtime(Van van, LocalHost& host, NodeRuntimeOptions options) {
  switch (van) {
    case Van::kEpoll:
      return std::make_unique<EpollNodeRuntime>(host, std::move(options));
    case Van::kUcx:
      return std::make_unique<UcxNodeRuntime>(host, std::move(options));
    case Van::kZmq:
      break;
  }
  return std::make_unique<ZmqNodeRuntime>(host, std::move(options));
}

}  // namespace pstwin::realnet
