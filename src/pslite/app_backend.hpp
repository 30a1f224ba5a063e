// Where the ps-lite API of this process runs its node. Without an installed AppBackend it is the real
// backend: one node per process on a LoopRuntime and the van of DMLC_PS_VAN_TYPE (postoffice.cpp). The
// simulator's driver (src/simapp) installs one before any application code runs: every simulated
// process then has its own Postoffice, environment and SimNode, all in one address space.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/runtime.hpp"
#include "realnet/node_env.hpp"
#include "scenario/scenario.hpp"

namespace ps {
class Postoffice;
}

namespace pstwin::pslite {

// This process's running node, as the ps-lite API drives it.
class NodeLink {
 public:
  virtual ~NodeLink() = default;
  // Runs `event` on the node's event loop; false: the node has stopped and the event was dropped.
  virtual bool post(std::function<void()> event) = 0;
  // Blocks until the node stopped. A failed node ends the process (real backend) or the run
  // (simulator) with the reason: this does not return then.
  virtual void watch() = 0;
  // After watch(): the node's event loop ends; post() refuses events from then on.
  virtual void halt() = 0;
};

// Builds a node's protocol for its runtime, the job's scenario and the scheduler's address.
using MakeAppProtocol =
    std::function<std::unique_ptr<Node>(Runtime&, const Scenario&, const std::string& scheduler_address)>;

class AppBackend {
 public:
  virtual ~AppBackend() = default;
  // The calling process's Postoffice (what ps::Postoffice::Get() returns).
  virtual ps::Postoffice& postoffice() = 0;
  // The environment the calling process was started with (its DMLC_* variables).
  virtual std::map<std::string, std::string> environment() = 0;
  // Starts the calling process's node, with the protocol `make` builds.
  virtual std::unique_ptr<NodeLink> launch(const realnet::NodeEnv& env, const MakeAppProtocol& make) = 0;
};

// Every later ps-lite call of this process goes through `backend` (null: the real backend). Install
// it before any application code runs; it must outlive them.
void install_app_backend(AppBackend* backend);

// A Postoffice of its own for each simulated process (the real backend's is a singleton).
using PostofficePtr = std::unique_ptr<ps::Postoffice, void (*)(ps::Postoffice*)>;
PostofficePtr make_postoffice();

}  // namespace pstwin::pslite
