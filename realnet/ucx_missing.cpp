// Stands in for realnet/ucx_runtime.cpp when pstwin is built without UCX: the van is refused with the
// package to install (realnet/CMakeLists.txt).
#include <stdexcept>
#include <string>

#include "realnet/ucx_runtime.hpp"
#include "realnet/van.hpp"

namespace pstwin::realnet {

namespace {

[[noreturn]] void refuse_ucx() {
  throw std::runtime_error(std::string(van_unavailable(Van::kUcx)));
}

}  // namespace

class UcxNodeRuntime::Worker {};

UcxNodeRuntime::UcxNodeRuntime(LocalHost& host, Options options) : LoopRuntime(host, std::move(options)) {
  refuse_ucx();
}
UcxNodeRuntime::~UcxNodeRuntime() = default;
void UcxNodeRuntime::bind_peer(NodeId, const std::string&) {}
void UcxNodeRuntime::queue(Message) {}
void UcxNodeRuntime::receive() {}
void UcxNodeRuntime::flush() {}
void UcxNodeRuntime::wait(long) {}
void UcxNodeRuntime::wake() {}
void UcxNodeRuntime::set_send_weights(std::uint64_t, std::span<const PeerWeight>) {}

struct RawUcxClient::State {};
RawUcxClient::RawUcxClient(std::string_view) {
  refuse_ucx();
}
RawUcxClient::~RawUcxClient() = default;
std::optional<std::string> RawUcxClient::welcome(int) {
  refuse_ucx();
}
void RawUcxClient::send(unsigned, std::span<const std::byte>, std::span<const std::byte>, bool) {
  refuse_ucx();
}
void RawUcxClient::send_proof(std::span<const std::byte>, std::uint64_t) {
  refuse_ucx();
}
void RawUcxClient::send_frame(std::uint64_t, std::span<const std::byte>, std::span<const std::byte>, bool) {
  refuse_ucx();
}

}  // namespace pstwin::realnet
