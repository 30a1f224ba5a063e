// Runs a whole scenario (scheduler, servers, workers) as node runtimes of one van (ZeroMQ or epoll)
// inside this process,
// over real TCP sockets on 127.0.0.1. The scenario's hosts are ignored: every node is local.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "realnet/van.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

struct LocalRunOptions {
  // Receives every log line of every node (from several threads, one at a time); null: stderr.
  std::function<void(std::string_view)> log;
  // Called once every node is bound and started, with (label, address) per node.
  std::function<void(const std::vector<std::pair<std::string, std::string>>&)> on_started;
  // Wall-clock limit; 0: run.time_limit capped at 120 s (an in-process test job).
  double timeout_s = 0;
  Van van = default_van();  // the transport of every node
  // The job token every node proves on every connection (realnet/job_auth.hpp): nullopt makes a
  // random one, as `pstwin run` does; "" runs without one.
  std::optional<std::string> job_token;
  bool encrypt = false;  // PSTWIN_ENCRYPT=curve on every node (the zmq van; needs a job token)
  // The epoll van: the nodes' event loops run on a LoopPool (realnet/loop_pool.hpp), any of its threads
  // running any node, instead of each on a thread of its own.
  bool shared_loops = true;
  int loop_threads =
      0;  // > 0: the pool's threads (at most one per node); 0: one per CPU, at most one per node
};

RunReport run_local(const Scenario& scenario, const LocalRunOptions& options = {});

}  // namespace pstwin::realnet
