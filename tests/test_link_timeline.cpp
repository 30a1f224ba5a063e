// Utilisation over time: the timeline's buckets keep every byte as they widen, and a simulated
// run's links carry over time exactly the bytes they report in total, at no more than their bandwidth.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

#include "report/link_timeline.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

double sum(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0);
}

TEST(LinkTimeline, SpreadsATransferOverItsBucketsAndKeepsEveryByteAsItWidens) {
  LinkTimeline timeline(2, 1.0, 4);
  timeline.add(0, 0.5, 2.5, 200);  // 50 in [0.5, 1), 100 in [1, 2), 50 in [2, 2.5)
  timeline.add(1, 3.0, 3.0, 7);    // an instant: all in its bucket
  EXPECT_EQ(timeline.width_s(), 1.0);
  EXPECT_EQ(timeline.bytes(0), (std::vector<double>{50, 100, 50, 0}));
  EXPECT_EQ(timeline.bytes(1), (std::vector<double>{0, 0, 0, 7}));
  timeline.add(0, 9.0, 10.0, 30);  // past 4 buckets of 1 s: twice widened, to 4 s
  EXPECT_EQ(timeline.width_s(), 4.0);
  EXPECT_EQ(timeline.bytes(0), (std::vector<double>{200, 0, 30}));
  EXPECT_EQ(timeline.bytes(1), (std::vector<double>{7, 0, 0}));
}

TEST(LinkTimeline, ASimulatedRunsLinksCarryOverTimeWhatTheyCarriedInAll) {
  const auto dir = fresh_dir("link-timeline");
  const auto r =
      run_pstwin("sim scenarios/saturation_8w2s.toml -q --set output.trace=false --out " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = read_json(dir / "results.json");
  int with_traffic = 0;
  for (const auto& link : results["links"]) {
    ASSERT_TRUE(link.contains("over_time")) << link.dump();
    const double width = link["over_time"]["width_s"];
    const auto values = link["over_time"]["utilization"].get<std::vector<double>>();
    ASSERT_GT(width, 0);
    ASSERT_LE(values.size(), 100u);
    const double bandwidth = link["bandwidth_Bps"];
    const double bytes = link["bytes"];
    // Rounded to 1e-4 per bucket: the total agrees within that per bucket.
    EXPECT_NEAR(sum(values) * bandwidth * width, bytes, 1e-4 * bandwidth * width * values.size() + 1)
        << link["name"];
    // Each transfer's bytes are spread evenly over its time on the wire, which smooths flows that
    // shared the link unevenly: a bucket may read a little over the bandwidth, never a multiple of it
    // (a unit error would).
    for (const double u : values) EXPECT_LE(u, 1.25) << link["name"] << " " << link["over_time"].dump();
    if (bytes > 0) ++with_traffic;
  }
  EXPECT_GT(with_traffic, 0);
}

}  // namespace
}  // namespace pstwin
