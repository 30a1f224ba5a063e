// `pstwin launch --hostfile`: the hostfile, the placement of nodes on hosts, what the launcher and
// its nodes say to each other over stdin and stdout, and whole jobs on this machine through a
// remote shell command that runs locally (`env`). Namespace hosts: tests/test_netns.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "realnet/job_children.hpp"
#include "realnet/job_launch.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using Clock = std::chrono::steady_clock;
using realnet::LaunchError;
using realnet::parse_hostfile;

// The message of the LaunchError `f` throws; "" (and a test failure) if it throws none.
template <typename F>
std::string launch_error(F&& f) {
  try {
    f();
  } catch (const LaunchError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no LaunchError";
  return "";
}

TEST(Launch, HostfileTakesSlotsAddressesCommentsAndBlankLines) {
  const auto hosts = parse_hostfile(
      "# the cluster\n"
      "10.0.0.1 slots=2\n"
      "\n"
      "  user@10.0.0.2   # a comment after a host\n"
      "gpu3 address=10.0.0.3 slots=1\n",
      "hosts.txt");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "10.0.0.1");
  EXPECT_EQ(hosts[0].address, "10.0.0.1");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[0].line, 2);
  EXPECT_EQ(hosts[1].name, "user@10.0.0.2");
  EXPECT_EQ(hosts[1].address, "10.0.0.2");
  EXPECT_EQ(hosts[1].slots, 0);  // no limit
  EXPECT_EQ(hosts[2].name, "gpu3");
  EXPECT_EQ(hosts[2].address, "10.0.0.3");
  // One host: loopback is where everything runs, and a name resolves here.
  const auto local = parse_hostfile("localhost\n", "one.txt");
  ASSERT_EQ(local.size(), 1u);
  EXPECT_TRUE(local[0].address.starts_with("127.")) << local[0].address;
}

TEST(Launch, HostfileMistakesNameTheLineAndTheFix) {
  auto error = [](const std::string& text) {
    return launch_error([&] { parse_hostfile(text, "hosts.txt"); });
  };
  EXPECT_NE(error("10.0.0.1\n127.0.0.1 slots=2\n")
                .find("hosts.txt:2: 127.0.0.1's address 127.0.0.1 is a loopback address, but the job spans 2 "
                      "hosts"),
            std::string::npos);
  EXPECT_NE(error("10.0.0.1\nlocalhost\n").find("hosts.txt:2: localhost's address 127."), std::string::npos);
  EXPECT_NE(error("10.0.0.1 slots=0\n").find("hosts.txt:1: slots=0: expected"), std::string::npos);
  EXPECT_NE(error("10.0.0.1 slots=2x\n").find("hosts.txt:1: slots=2x"), std::string::npos);
  EXPECT_NE(error("10.0.0.1 cores=4\n").find("hosts.txt:1: \"cores=4\": expected slots=N or address=IP"),
            std::string::npos);
  EXPECT_NE(error("a address=10.0.0\n").find("hosts.txt:1: address=10.0.0: expected the IPv4 address"),
            std::string::npos);
  EXPECT_NE(error("10.0.0.1\n10.0.0.1\n").find("hosts.txt:2: 10.0.0.1 again (line 1)"), std::string::npos);
  EXPECT_NE(error("no-such-host.invalid\n").find("hosts.txt:1: cannot resolve \"no-such-host.invalid\""),
            std::string::npos);
  EXPECT_NE(error("# nothing\n\n").find("hosts.txt: no hosts"), std::string::npos);
}

// Only the counts matter to the placement (validators need an mlp workload to load).
Scenario roles(int servers, int workers, int validators = 0) {
  Scenario sc = parse_scenario("name = \"placement\"\n[roles]\nservers = " + std::to_string(servers) +
                                   "\nworkers = " + std::to_string(workers) + "\n",
                               "test");
  sc.roles.validators = validators;
  return sc;
}

std::string placement(const std::vector<realnet::LaunchNode>& nodes) {
  std::string text;
  for (const auto& n : nodes) text += n.name + "@" + std::to_string(n.host) + " ";
  return text;
}

TEST(Launch, NodesAreDealtRoundRobinFromTheFirstHostSkippingFullOnes) {
  const auto three = parse_hostfile("10.0.0.1\n10.0.0.2\n10.0.0.3\n", "h");
  EXPECT_EQ(placement(realnet::place_nodes(roles(2, 4), three)),
            "scheduler@0 server0@0 server1@1 worker0@2 worker1@0 worker2@1 worker3@2 ");
  // The first host holds one node: the scheduler takes no slot, the others go elsewhere.
  const auto slotted = parse_hostfile("10.0.0.1 slots=1\n10.0.0.2 slots=3\n", "h");
  EXPECT_EQ(placement(realnet::place_nodes(roles(1, 2, 1), slotted)),
            "scheduler@0 server0@0 worker0@1 worker1@1 validator0@1 ");
  EXPECT_NE(launch_error([&] {
              realnet::place_nodes(roles(2, 4), slotted);
            }).find("the hostfile has 4 slots, the scenario needs 6"),
            std::string::npos);
}

TEST(Launch, MessageRoundTripsAndABadOneIsRefused) {
  const realnet::LaunchMessage sent{{{"DMLC_ROLE", "worker"}, {"PSTWIN_JOB_TOKEN", "a=b c"}},
                                    "name = \"x\"\n[roles]\nworkers = 2\n"};
  std::istringstream in(realnet::launch_message_text(sent) + "anything after it is not read");
  const auto got = realnet::read_launch_message(in);
  EXPECT_EQ(got.env, sent.env);
  EXPECT_EQ(got.scenario, sent.scenario);
  auto error = [](const std::string& text) {
    std::istringstream bad(text);
    return launch_error([&] { realnet::read_launch_message(bad); });
  };
  EXPECT_NE(error("").find("expected \"pstwin-launch 1\""), std::string::npos);
  EXPECT_NE(error("DMLC_ROLE=worker\n").find("expected \"pstwin-launch 1\""), std::string::npos);
  EXPECT_NE(error("pstwin-launch 1\nenv NOEQUALS\n").find("expected env NAME=VALUE"), std::string::npos);
  EXPECT_NE(error("pstwin-launch 1\nenv A=1\n").find("ended before"), std::string::npos);
  EXPECT_NE(error("pstwin-launch 1\nscenario 99999999999\n").find("at most"), std::string::npos);
  EXPECT_NE(error("pstwin-launch 1\nscenario 10\nname").find("within the scenario's 10 bytes"),
            std::string::npos);
  EXPECT_NE(error("pstwin-launch 1\n" + std::string(100000, 'x')).find("over 65536 bytes"),
            std::string::npos);
}

TEST(Launch, FramedReportIsFoundAmongOtherOutput) {
  realnet::NodePart part;
  part.role = Role::kWorker;
  part.rank = 1;
  part.id = 11;
  part.digests[3] = "abc";
  part.scheduler = "10.0.0.1:9000";
  const std::string output = "pstwin node: worker rank 1 (node 11): ok\n" + realnet::framed_report(part) +
                             "Connection to gpu3 closed.\n";
  const auto got = realnet::report_from_output(output);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->id, 11u);
  EXPECT_EQ(got->digests.at(3), "abc");
  EXPECT_EQ(got->scheduler, "10.0.0.1:9000");
  EXPECT_FALSE(realnet::report_from_output("pstwin node: worker: FAILED\n").has_value());
  const std::string framed = realnet::framed_report(part);
  EXPECT_FALSE(realnet::report_from_output(framed.substr(0, framed.size() - 10)).has_value());  // cut short
}

TEST(Launch, RemoteCommandPutsTheHostWhereTheTemplateSays) {
  realnet::JobLaunchOptions options;
  options.remote_binary = "/opt/pstwin/bin/pstwin";
  realnet::LaunchHost host{"gpu3", "10.0.0.3", 0, 1};
  using Words = std::vector<std::string>;
  EXPECT_EQ(realnet::remote_command(options, host),
            (Words{"ssh", "-o", "BatchMode=yes", "gpu3", "/opt/pstwin/bin/pstwin", "node", "--launched"}));
  options.rsh = "ip netns exec {host}";
  EXPECT_EQ(realnet::remote_command(options, host),
            (Words{"ip", "netns", "exec", "gpu3", "/opt/pstwin/bin/pstwin", "node", "--launched"}));
  options.rsh = "ssh";  // the host appended
  EXPECT_EQ(realnet::remote_command(options, host),
            (Words{"ssh", "gpu3", "/opt/pstwin/bin/pstwin", "node", "--launched"}));
  options.rsh = " ";
  EXPECT_NE(launch_error([&] { realnet::remote_command(options, host); }).find("--rsh \" \": empty"),
            std::string::npos);
  options.rsh = "ssh";
  options.remote_binary = "/home/me/my pstwin";
  EXPECT_NE(launch_error([&] {
              realnet::remote_command(options, host);
            }).find("--remote-pstwin /home/me/my pstwin: the remote shell would interpret"),
            std::string::npos);
}

// A one-host hostfile and a "remote shell" that runs the node here: the whole launcher path (stdin
// message, token, framed reports, merge) without ssh, and the simulator's final model.
TEST(Launch, LocalHostfileGivesTheSimulatorsModelDigest) {
  const auto dir = testing::fresh_dir("launch-local");
  std::ofstream(dir / "hosts") << "# this machine\n127.0.0.1\n";
  const std::string sets = " --set workload.iterations=2 --set roles.workers=2 --set roles.servers=1";
  const auto launched =
      testing::run_pstwin("launch scenarios/quickstart.toml --hostfile " + (dir / "hosts").string() +
                          " --rsh 'env LAUNCH_HOST={host}' --out " + (dir / "real").string() + sets);
  ASSERT_EQ(launched.exit_code, 0) << launched.output;
  EXPECT_NE(launched.output.find("started worker1 on 127.0.0.1"), std::string::npos) << launched.output;
  const std::string digest = testing::simulated_digest("scenarios/quickstart.toml" + sets, dir / "sim");
  const auto real = testing::read_json(dir / "real" / "results.json");
  EXPECT_EQ(real["model_digest"], digest);
  EXPECT_TRUE(real["completed"].get<bool>()) << real.dump();
  EXPECT_EQ(real["iterations"].size(), 2u);
  EXPECT_EQ(real["invariants"]["violation_count"], 0);
  // The nodes authenticated with the job's token, which appears on no command line and in no file.
  for (const auto& entry : std::filesystem::directory_iterator(dir / "real" / "parts")) {
    const std::string text = testing::read_text(entry.path());
    EXPECT_EQ(text.find("PSTWIN_JOB_TOKEN"), std::string::npos) << entry.path();
    EXPECT_EQ(text.find("unauthenticated"), std::string::npos) << entry.path() << ": " << text;
  }
  // The reports were kept as `pstwin node --report` writes them: merge reads them again.
  const auto merged = testing::run_pstwin("merge -q " + (dir / "real" / "parts").string() + " --out " +
                                          (dir / "merged").string());
  EXPECT_EQ(merged.exit_code, 0) << merged.output;
  EXPECT_EQ(testing::read_json(dir / "merged" / "results.json")["model_digest"], digest);
}

// `pstwin launch --encrypt curve`: the launch message turns encryption on for every node (each says
// so), and the job ends with the simulator's model.
TEST(Encryption, LaunchedJobEncryptsEveryNodeAndEndsWithTheSimulatorsModel) {
  const auto dir = testing::fresh_dir("launch-encrypted");
  std::ofstream(dir / "hosts") << "127.0.0.1\n";
  const std::string sets = " --set workload.iterations=2 --set roles.workers=2 --set roles.servers=1";
  const auto launched = testing::run_pstwin(
      "launch scenarios/quickstart.toml --hostfile " + (dir / "hosts").string() +
      " --rsh 'env LAUNCH_HOST={host}' --encrypt curve -q --out " + (dir / "real").string() + sets);
  ASSERT_EQ(launched.exit_code, 0) << launched.output;
  const std::string digest = testing::simulated_digest("scenarios/quickstart.toml" + sets, dir / "sim");
  EXPECT_EQ(testing::read_json(dir / "real" / "results.json")["model_digest"], digest);
  int logs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "real" / "parts")) {
    if (entry.path().extension() != ".log") continue;
    ++logs;
    EXPECT_NE(testing::read_text(entry.path()).find("traffic is encrypted (ZeroMQ CURVE"), std::string::npos)
        << entry.path();
  }
  EXPECT_EQ(logs, 4);  // the scheduler, a server and two workers
}

// A node that cannot start fails the job, naming the node, its host and what its shell said; SIGTERM
// to the launcher kills every node it started.
TEST(Launch, FailedNodeOrSignalStopsEveryNode) {
  const auto dir = testing::fresh_dir("launch-stop");
  std::ofstream(dir / "hosts") << "127.0.0.1\n";
  const auto failed =
      testing::run_pstwin("launch -q scenarios/quickstart.toml --hostfile " + (dir / "hosts").string() +
                          " --rsh 'env LAUNCH_HOST={host}' --remote-pstwin /nonexistent/pstwin --out " +
                          (dir / "failed").string());
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("on 127.0.0.1 failed with exit status 127"), std::string::npos)
      << failed.output;

  testing::ChildProcess launch(
      {"launch", "scenarios/quickstart.toml", "--hostfile", (dir / "hosts").string(), "--rsh",
       "env LAUNCH_HOST={host}", "--out", (dir / "stopped").string(), "--set", "workload.iterations=1000000"},
      dir / "log");
  const std::regex started(R"(started worker3 on 127\.0\.0\.1 \(pid (\d+)\))");
  std::smatch worker;
  std::string output;
  for (const auto until = Clock::now() + std::chrono::seconds(30); Clock::now() < until;) {
    output = launch.output();
    if (std::regex_search(output, worker, started)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::regex_search(output, worker, started)) << output;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(launch.pid(), SIGTERM), 0);
  EXPECT_EQ(launch.wait_until(Clock::now() + std::chrono::seconds(30)), 128 + SIGTERM) << launch.output();
  const pid_t pid = static_cast<pid_t>(std::stol(worker[1]));
  EXPECT_NE(::kill(pid, 0), 0) << "worker3 (pid " << pid << ") outlived the launcher";
}

// A launched node stops when its stdin ends (the launcher stopped the job, died, or ssh dropped) as
// on SIGTERM, and still sends its report: here a scheduler whose workers never come.
TEST(Launch, NodeStopsWhenItsStdinEndsAndStillReports) {
  const auto dir = testing::fresh_dir("launch-stdin");
  const realnet::LaunchMessage message{
      {{"DMLC_ROLE", "scheduler"},
       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
       {"DMLC_PS_ROOT_PORT", "0"},
       {"DMLC_NUM_WORKER", "2"},
       {"DMLC_NUM_SERVER", "1"},
       {"PSTWIN_JOB_TOKEN", std::string(64, 'a')}},
      resolved_toml(load_scenario(std::string(PSTWIN_SOURCE_DIR) + "/scenarios/quickstart.toml"))};
  std::ofstream(dir / "stdin") << realnet::launch_message_text(message);
  // What comes on stdin is checked as the environment is: port 0 is refused.
  // stdin stays open (a writer on a FIFO, killed once the node exits) however long the node takes to
  // start: its exit status is then its own, not the SIGTERM of stdin's end.
  const std::string fifo = (dir / "stdin.fifo").string();
  auto r =
      testing::run_shell("mkfifo " + fifo + "; (cat " + (dir / "stdin").string() + "; exec sleep 60) > " +
                         fifo + " 2>/dev/null & timeout 120 " + PSTWIN_BINARY + " node --launched < " + fifo +
                         " > " + (dir / "out").string() + "; code=$?; kill $! 2>/dev/null; exit $code");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("DMLC_PS_ROOT_PORT"), std::string::npos) << r.output;

  auto with_port = message;
  with_port.env["DMLC_PS_ROOT_PORT"] = std::to_string(realnet::free_local_port());
  std::ofstream(dir / "stdin") << realnet::launch_message_text(with_port);
  // `timeout` (status 124) only keeps a node that never stops from hanging the test.
  // 5 s: the node is up and handling SIGTERM by then, on a loaded machine too.
  r = testing::run_shell("(cat " + (dir / "stdin").string() + "; sleep 5) | timeout 120 " + PSTWIN_BINARY +
                         " node --launched > " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  const auto part = realnet::report_from_output(testing::read_text(dir / "out"));
  ASSERT_TRUE(part.has_value()) << testing::read_text(dir / "out");
  EXPECT_EQ(part->role, Role::kScheduler);
  EXPECT_FALSE(part->completed);
  EXPECT_EQ(part->scheduler, "127.0.0.1:" + with_port.env["DMLC_PS_ROOT_PORT"]);
}

}  // namespace
}  // namespace pstwin
