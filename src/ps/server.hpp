// A parameter server: a key-value store summing workers' pushes (BytePS's server). The store and its
// rounds are an Aggregator (src/ps/aggregator.hpp), shared with worker-side aggregators; the server
// adds ZenoPS's validated pushes. BYTEPS_SERVER_ENGINE_THREAD engine lanes.
// ps.balancing = "lb": keys are owned per iteration as the scheduler's decision says; requests pass a
// RangeIntake (src/ps/lb_intake.hpp): one that arrives before its iteration's decision waits for it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "core/payload.hpp"
#include "ps/aggregator.hpp"
#include "ps/balance.hpp"
#include "ps/lb_intake.hpp"
#include "ps/ps_node.hpp"
#include "ps/training.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class Server final : public PsNode {
 public:
  // `training` (may be null: synthetic sums) must outlive the server.
  Server(NodeContext context, int rank, const SyntheticWorkload& workload,
         const TrainingModel* training = nullptr);

 private:
  using Round = Aggregator::Round;
  using KeyState = Aggregator::KeyState;

  void on_ready() override;
  void on_app_message(Message message) override;
  void on_shutdown() override;
  std::string describe_app_state() const override;

  // ps.balancing = "lb": take up a decision and serve the requests that waited for it.
  void on_decision(const Message& message);
  void dispatch(Message message);
  void validated_push(Message message);

  const SyntheticWorkload& workload_;
  const TrainingModel* training_;
  Aggregator aggregator_;
  std::unique_ptr<DecisionBook> decisions_;  // lb only
  BandwidthMonitor monitor_;                 // lb only
  std::unique_ptr<RangeIntake> intake_;      // lb only
  // Async with validators: pushes not yet judged, by (worker, key, round), with the worker's pull
  // once it comes (answered after the validator's decision is applied).
  std::map<std::tuple<int, std::uint64_t, std::uint32_t>, std::optional<Message>> awaiting_verdict_;
};

}  // namespace pstwin
