#include "realnet/van.hpp"

#include "realnet/epoll_runtime.hpp"
#include "realnet/zmq_runtime.hpp"

namespace pstwin::realnet {

std::string_view van_name(Van van) {
  return van == Van::kEpoll ? "epoll" : "zmq";
}

std::optional<Van> parse_van(std::string_view text) {
  if (text == "zmq") return Van::kZmq;
  if (text == "epoll") return Van::kEpoll;
  return std::nullopt;
}

std::unique_ptr<LoopRuntime> make_node_runtime(Van van, LocalHost& host, NodeRuntimeOptions options) {
  if (van == Van::kEpoll) return std::make_unique<EpollNodeRuntime>(host, std::move(options));
  return std::make_unique<ZmqNodeRuntime>(host, std::move(options));
}

}  // namespace pstwin::realnet
