// The van: which transport a real node's runtime uses (ps-lite's DMLC_PS_VAN_TYPE). "epoll" is FPT's
// epoll TCP transport with the send pool (EpollNodeRuntime, the default: no thread between the
// protocol and the kernel); "zmq" is ZeroMQ (ZmqNodeRuntime, the default with encryption, which only
// it has); "ucx" is UCX's UCP (UcxNodeRuntime: shared memory, TCP or RDMA, as UCX_TLS
// allows). All speak the same 64-byte frame but not the same wire protocol: every node of a job must
// use the same van.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace pstwin::realnet {

enum class Van { kZmq, kEpoll, kUcx };

// The van of a job that names none: epoll, or zmq when the job is encrypted (PSTWIN_ENCRYPT=curve).
constexpr Van default_van(bool encrypt = false) {
  return encrypt ? Van::kZmq : Van::kEpoll;
}

std::string_view van_name(Van van);
std::optional<Van> parse_van(std::string_view text);  // "zmq", "epoll" or "ucx"; nullopt otherwise
inline constexpr std::string_view kVanChoices = "zmq, epoll, ucx";
// Why `van` cannot run in this build ("" when it can): the UCX van needs pstwin built with UCX.
std::string_view van_unavailable(Van van);

class LoopRuntime;
class LocalHost;
struct NodeRuntimeOptions;

// Why `van` cannot encrypt ("" when it can): only the ZeroMQ van has CURVE.
std::string encryption_unavailable(Van van);

// A node runtime over `van`; binds before returning (throws BindError if it cannot). Throws
// std::invalid_argument for options.encrypt without a job token or on a van that cannot encrypt.
std::unique_ptr<LoopRuntime> make_node_runtime(Van van, LocalHost& host, NodeRuntimeOptions options);

}  // namespace pstwin::realnet
