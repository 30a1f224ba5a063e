#include "torch/sum_server.hpp"

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <utility>

namespace pstwin::torch {

SumServer::SumServer(int num_workers) : num_workers_(num_workers) {}

void SumServer::run() {
  ps::Start(0);
  {
    SumServer sums(ps::NumWorkers());
    ps::KVServer<char> server(0);
    server.set_request_handle([&sums](const ps::KVMeta& meta, const ps::KVPairs<char>& data,
                                      ps::KVServer<char>* self) { sums.handle(meta, data, self); });
    // Returns when every node finalized: the workers' shutdown() ends the job.
    ps::Finalize(0, true);
  }
}

std::string SumServer::refusal(const ps::KVMeta& meta, const ps::KVPairs<char>& data) const {
  if (!meta.push || !meta.pull) return "not a push_pull (a push and a pull in one request)";
  if (data.keys.size() != 1) return std::to_string(data.keys.size()) + " keys, push_pull sends one";
  const auto type = element_type_of_cmd(meta.cmd);
  if (!type) return "element type code " + std::to_string(meta.cmd) + " is not one of 0..4";
  if (data.vals.empty() || data.vals.size() % element_size(*type) != 0) {
    return std::to_string(data.vals.size()) + " bytes, not a whole number of " +
           std::string(element_name(*type)) + " elements";
  }
  const auto it = rounds_.find(data.keys[0]);
  if (it == rounds_.end() || it->second.waiting.empty()) return {};
  const Round& round = it->second;
  if (round.type != *type || round.sum.size() != data.vals.size()) {
    return std::to_string(data.vals.size()) + " bytes of " + std::string(element_name(*type)) +
           " where this round has " + std::to_string(round.sum.size()) + " bytes of " +
           std::string(element_name(round.type)) +
           " (the workers declared their tensors in different orders or sizes)";
  }
  if (std::any_of(round.waiting.begin(), round.waiting.end(),
                  [&](const ps::KVMeta& w) { return w.sender == meta.sender; })) {
    return "a second push from the same worker in one round";
  }
  return {};
}

void SumServer::handle(const ps::KVMeta& meta, const ps::KVPairs<char>& data, ps::KVServer<char>* server) {
  std::vector<ps::KVMeta> answer;
  ps::KVPairs<char> result;
  {
    const std::lock_guard lock(mutex_);
    if (const std::string why = refusal(meta, data); !why.empty()) {
      std::fprintf(stderr,
                   "pstwin.server: request %d from node %d refused: %s; answered with its own values\n",
                   meta.timestamp, meta.sender, why.c_str());
      server->Response(meta, data);
      return;
    }
    Round& round = rounds_[data.keys[0]];
    const auto type = *element_type_of_cmd(meta.cmd);
    if (round.waiting.empty()) {
      round.type = type;
      round.sum.assign(data.vals.begin(), data.vals.end());
    } else {
      add_elements(type, std::as_writable_bytes(std::span(round.sum)),
                   std::as_bytes(std::span(data.vals.data(), data.vals.size())));
    }
    round.waiting.push_back(meta);
    if (static_cast<int>(round.waiting.size()) < num_workers_) return;
    answer = std::exchange(round.waiting, {});
    result.keys = data.keys;
    result.vals = ps::SArray<char>(round.sum);  // copied: the next round reuses the buffer
  }
  for (const auto& waiting : answer) server->Response(waiting, result);
}

}  // namespace pstwin::torch
