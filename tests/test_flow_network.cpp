// sim.network_model = "flow": the incremental max-min solver against exact progressive filling on
// random NIC-bound fabrics, and the whole simulator with it against SimGrid's own sharing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sim/flow_network.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using sim::MaxMinFlows;
using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

TEST(FlowNetwork, TwoFlowsShareALinkByPenaltyAndOneFinishesFirst) {
  MaxMinFlows flows;
  const int link = flows.add_link(100);
  const auto a = flows.add_flow(0, 100, /*penalty=*/1, MaxMinFlows::kUnbounded, {{link, 1}});
  const auto b = flows.add_flow(0, 100, /*penalty=*/3, MaxMinFlows::kUnbounded, {{link, 1}});
  EXPECT_DOUBLE_EQ(flows.rate(a), 75);  // level 75: a gets 75/1, b 75/3
  EXPECT_DOUBLE_EQ(flows.rate(b), 25);
  const auto [time, first] = flows.next_completion();
  EXPECT_EQ(first, a);
  EXPECT_NEAR(time, 100.0 / 75, 1e-12);
  flows.remove_flow(time, a);
  EXPECT_DOUBLE_EQ(flows.rate(b), 100);
  EXPECT_NEAR(flows.remaining(time, b), 100 - 25 * time, 1e-9);
  EXPECT_NEAR(flows.next_completion().first, time + (100 - 25 * time) / 100, 1e-12);
}

TEST(FlowNetwork, UnusedShareGoesToFlowsThatCanUseIt) {
  // a and b share link 0; b is capped at 10 by link 1, so a gets the other 90 (max-min, not 50/50).
  MaxMinFlows flows;
  const int shared = flows.add_link(100), narrow = flows.add_link(10);
  const auto a = flows.add_flow(0, 1e6, 1, MaxMinFlows::kUnbounded, {{shared, 1}});
  const auto b = flows.add_flow(0, 1e6, 1, MaxMinFlows::kUnbounded, {{shared, 1}, {narrow, 1}});
  EXPECT_NEAR(flows.rate(a), 90, 1e-9);
  EXPECT_NEAR(flows.rate(b), 10, 1e-9);
  const auto c = flows.add_flow(0, 1e6, 1, /*bound=*/5, {{shared, 1}});
  EXPECT_NEAR(flows.rate(c), 5, 1e-9);
  EXPECT_NEAR(flows.rate(a), 85, 1e-9);
}

// Random star fabrics (up and down NIC per host, cross traffic on the reverse NICs), flows
// starting and finishing in random order: after every event the incremental levels must give the
// rates of a from-scratch progressive filling.
TEST(FlowNetwork, IncrementalRatesMatchExactMaxMinOnRandomFabrics) {
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    MaxMinFlows flows;
    const int hosts = 3 + static_cast<int>(rng() % 6);
    std::vector<int> up, down;
    for (int h = 0; h < hosts; ++h) {
      up.push_back(flows.add_link(1e9 * static_cast<double>(1 + rng() % 4)));
      down.push_back(flows.add_link(1e9 * static_cast<double>(1 + rng() % 4)));
    }
    double now = 0;
    std::size_t checked = 0;
    for (int event = 0; event < 300; ++event) {
      if (flows.flows() < 4 || rng() % 3 != 0) {
        const int from = static_cast<int>(rng() % hosts);
        int to = static_cast<int>(rng() % hosts);
        if (to == from) to = (to + 1) % hosts;
        const double penalty = 1e-5 * static_cast<double>(1 + rng() % 3);
        const double bound = rng() % 5 == 0 ? 3e8 : MaxMinFlows::kUnbounded;
        flows.add_flow(now, 1e6 * static_cast<double>(1 + rng() % 50), penalty, bound,
                       {{up[from], 1}, {down[to], 1}, {up[to], 0.05}, {down[from], 0.05}});
      } else {
        const auto [time, id] = flows.next_completion();
        ASSERT_FALSE(std::isinf(time));
        ASSERT_GE(time, now - 1e-12);
        now = std::max(now, time);
        EXPECT_LT(flows.remaining(now, id), 1e-3) << "seed " << seed;
        flows.remove_flow(now, id);
      }
      for (const auto& [id, rate] : flows.exact_rates()) {
        ASSERT_NEAR(flows.rate(id), rate, 1e-6 * rate) << "seed " << seed << ", event " << event;
        ++checked;
      }
    }
    EXPECT_GT(checked, 300u);
  }
}

double mean_iteration(const std::string& scenario, const std::string& sets) {
  const auto dir = fresh_dir("flow-model");
  const auto run = run_pstwin("sim " + scenario + " -q --out " + dir.string() + " " + sets);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return read_json(dir / "results.json")["mean_iteration_s"].get<double>();
}

TEST(FlowNetwork, SaturationScenarioAgreesWithSimGridAndStaysWithinItsBound) {
  const double simgrid = mean_iteration("scenarios/saturation_8w2s.toml", "--set sim.network_model=simgrid");
  const double flow = mean_iteration("scenarios/saturation_8w2s.toml", "--set sim.network_model=flow");
  EXPECT_NEAR(flow, simgrid, 0.01 * simgrid);
}

TEST(FlowNetwork, TwoTierScaleScenarioAgreesWithSimGridAt64Workers) {
  const std::string sets = "--set roles.workers=64 --set workload.iterations=2";
  const double simgrid =
      mean_iteration("scenarios/scale_1024w_16s.toml", sets + " --set sim.network_model=simgrid");
  const double flow =
      mean_iteration("scenarios/scale_1024w_16s.toml", sets + " --set sim.network_model=flow");
  EXPECT_NEAR(flow, simgrid, 0.01 * simgrid);
}

TEST(FlowNetwork, SmpiModelIsRejectedNamingTheFields) {
  const auto run = run_pstwin(
      "sim scenarios/quickstart.toml -q --set sim.network_model=flow --set network.model=SMPI --out " +
      fresh_dir("flow-smpi").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("sim.network_model"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("SMPI"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace pstwin
