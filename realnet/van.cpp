#include "realnet/van.hpp"

#include <stdexcept>
#include <string>

#include "realnet/epoll_runtime.hpp"
#include "realnet/ucx_runtime.hpp"
#include "realnet/zmq_runtime.hpp"

namespace pstwin::realnet {

std::unique_ptr<LoopRuntime> make_node_runtime(Van van, LocalHost& host, NodeRuntimeOptions options) {
  if (options.encrypt) {
    if (const auto why = encryption_unavailable(van); !why.empty())
      throw std::invalid_argument("PSTWIN_ENCRYPT=curve: " + why);
    if (options.job_token.empty())
      throw std::invalid_argument(
          "PSTWIN_ENCRYPT=curve needs PSTWIN_JOB_TOKEN: the job's CURVE keys are derived from it; set it "
          "to the job's secret, the same on every node (e.g. `openssl rand -hex 32`)");
  }
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
