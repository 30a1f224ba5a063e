#include "realnet/van.hpp"

#include "realnet/epoll_runtime.hpp"
#include "realnet/ucx_runtime.hpp"
#include "realnet/zmq_runtime.hpp"

namespace pstwin::realnet {

std::string_view van_name(Van van) {
  switch (van) {
    case Van::kEpoll:
      return "epoll";
    case Van::kUcx:
      return "ucx";
    case Van::kZmq:
      break;
  }
  return "zmq";
}

std::optional<Van> parse_van(std::string_view text) {
  if (text == "zmq") return Van::kZmq;
  if (text == "epoll") return Van::kEpoll;
  if (text == "ucx") return Van::kUcx;
  return std::nullopt;
}

std::string_view van_unavailable(Van van) {
  return van == Van::kUcx ? ucx_unavailable_reason() : std::string_view();
}

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
