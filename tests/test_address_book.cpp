// The simulator's address book (sim/cluster.hpp): ids bound once per cluster, resolved on a node's
// first send. A node's sends go where its own bindings say, whatever other nodes bound the same id to,
// and a send to an id the node never bound fails as before.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <simgrid/s4u.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim/cluster.hpp"
#include "sim/platform.hpp"

namespace pstwin::sim {
namespace {

TEST(SimAddressBook, SlotRangesMergeAndAnswerMembership) {
  SlotRanges set;
  for (std::uint32_t slot = 10; slot < 20; ++slot) set.insert(slot);
  EXPECT_EQ(set.ranges(), 1U);
  set.insert(0);
  set.insert(2);
  set.insert(25);
  EXPECT_EQ(set.ranges(), 4U);
  set.insert(1);   // joins [0, 1) and [2, 3)
  set.insert(24);  // extends [25, 26) downwards
  set.insert(15);  // already in
  EXPECT_EQ(set.ranges(), 3U);
  for (std::uint32_t slot : {0U, 1U, 2U, 10U, 19U, 24U, 25U}) EXPECT_TRUE(set.contains(slot)) << slot;
  for (std::uint32_t slot : {3U, 9U, 20U, 23U, 26U}) EXPECT_FALSE(set.contains(slot)) << slot;
  for (std::uint32_t slot = 20; slot < 24; ++slot) set.insert(slot);
  set.insert(3);
  EXPECT_EQ(set.ranges(), 2U);  // [0, 4) and [10, 26)
  EXPECT_TRUE(set.contains(3));
  EXPECT_FALSE(set.contains(4));
}

// A node that binds ids, then sends one header-only message (key k) to each of `sends` at time `at`.
struct Plan {
  NodeId id = kNoNode;
  std::vector<std::pair<NodeId, std::string>> binds;
  std::vector<std::pair<NodeId, std::uint64_t>> sends;  // (recipient, key)
  Seconds at = 0;
};

class Scripted final : public Node {
 public:
  Scripted(SimNode& rt, Plan plan, std::ostringstream& log) : rt_(rt), plan_(std::move(plan)), log_(log) {}
  void start() override {
    rt_.set_self(plan_.id);
    for (const auto& [id, address] : plan_.binds) rt_.connect(id, address);
    rt_.start_timer(plan_.at, [this] {
      for (const auto& [to, key] : plan_.sends) {
        Message m;
        m.header.command = Command::kPush;
        m.header.recipient = to;
        m.header.key = key;
        rt_.send(std::move(m));
      }
    });
  }
  void on_message(Message message) override {
    log_ << rt_.label() << " got key " << message.header.key << " from " << message.header.sender << "\n";
  }
  std::string describe_state() const override { return "scripted"; }

 private:
  SimNode& rt_;
  Plan plan_;
  std::ostringstream& log_;
};

// Runs the plans (nodes a, b, c, d on hosts of a small flow-model cluster) and exits 0 if what arrived
// where, then the run's failure, reads `expected`; else prints it and exits 1. In a child process (a
// death test), as SimGrid's engine is one per process.
void run_plans(const std::vector<Plan>& plans_at_addresses, const std::string& expected) {
  const auto sc = parse_scenario(
      "name = \"book\"\n[roles]\nservers = 3\nworkers = 1\n[sim]\nnetwork_model = \"flow\"\n", "book", {});
  int argc = 2;
  std::string arg0 = "book", arg1 = "--log=root.thres:critical";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  configure_network_model(sc);
  Platform platform = build_platform(sc);
  Cluster cluster(sc, platform);
  std::ostringstream log;
  for (std::size_t i = 0; i < plans_at_addresses.size(); ++i) {
    const auto host = i < 3 ? sc.server_host_name(static_cast<int>(i)) : sc.worker_host_name(0);
    const std::string label(1, static_cast<char>('a' + i));
    auto& node = cluster.add_node(label, label + "@node", host);
    node.attach(std::make_unique<Scripted>(node, plans_at_addresses[i], log));
  }
  for (const auto& node : cluster.nodes()) node->spawn(0);
  engine.run();
  log << (cluster.failed() ? cluster.failure() : "no failure") << "\n";
  if (log.str() == expected) std::exit(0);
  std::fprintf(stderr, "got:\n%s", log.str().c_str());
  std::exit(1);
}

TEST(SimAddressBook, EachNodeSendsWhereItsOwnBindingsSay) {
  const std::vector<Plan> plans{
      // a binds 11 and 12 first: the book's entries are b and c.
      {10, {{11, "b@node"}, {12, "c@node"}, {99, "nobody@nowhere"}}, {{11, 1}, {12, 2}}, 0.1},
      // b binds 12 to d, then back to c: its last binding counts.
      {11, {{12, "d@node"}, {12, "c@node"}}, {{12, 4}}, 0.2},
      // c binds 11 to d, not to the book's b.
      {12, {{11, "d@node"}}, {{11, 3}}, 0.3},
      // d names an address nobody has for 11: it binds nothing, so its send there fails.
      {13, {{12, "c@node"}, {11, "nobody@nowhere"}}, {{12, 5}, {11, 6}}, 0.4},
  };
  EXPECT_EXIT(run_plans(plans,
                        "b got key 1 from 10\n"
                        "c got key 2 from 10\n"
                        "c got key 4 from 11\n"
                        "d got key 3 from 12\n"
                        "d: d has no connection to node 11 (no address known for it)\n"),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pstwin::sim
