// `pstwin node` as users launch it: real processes (scheduler, server, two workers) configured by
// the BytePS/ps-lite environment, plus the failures a user can cause (no scheduler, a typo in
// DMLC_ROLE, a port in use) and the cross-process shared-memory staging underneath.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "realnet/node_env.hpp"
#include "realnet/shm_staging.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using Env = std::map<std::string, std::string>;
using Clock = std::chrono::steady_clock;

// Holds a listening TCP socket on a free 127.0.0.1 port (the kernel picks it); close() frees it for
// a scheduler to bind, keep it open to make the port "in use".
class PortHolder {
 public:
  PortHolder() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 1) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error(std::string("cannot reserve a port: ") + std::strerror(errno));
    port_ = ntohs(addr.sin_port);
  }
  ~PortHolder() { close(); }
  PortHolder(const PortHolder&) = delete;
  PortHolder& operator=(const PortHolder&) = delete;
  int port() const { return port_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  int port_ = 0;
};

// One `pstwin node` child process with exactly `env` as its environment, output in a log file
// removed at the end of the test.
class NodeProcess : public testing::ChildProcess {
 public:
  NodeProcess(const std::string& name, const Env& env, const std::vector<std::string>& args)
      : ChildProcess(node_args(args),
                     std::filesystem::temp_directory_path() /
                         ("pstwin-node-" + std::to_string(::getpid()) + "-" + name + ".log"),
                     env_lines(env)) {}
  ~NodeProcess() {
    std::error_code ignored;
    std::filesystem::remove(output_path(), ignored);
  }

 private:
  static std::vector<std::string> node_args(const std::vector<std::string>& args) {
    std::vector<std::string> all{"node"};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
  static std::vector<std::string> env_lines(const Env& env) {
    std::vector<std::string> lines;
    for (const auto& [k, v] : env) lines.push_back(k + "=" + v);
    lines.push_back("PATH=/usr/bin:/bin");
    return lines;
  }
};

Env job_env(const std::string& role, int port) {
  return {{"DMLC_ROLE", role},
          {"DMLC_NUM_WORKER", "2"},
          {"DMLC_NUM_SERVER", "1"},
          {"DMLC_PS_ROOT_URI", "127.0.0.1"},
          {"DMLC_PS_ROOT_PORT", std::to_string(port)},
          {"PS_VERBOSE", "0"},
          {"BYTEPS_FORCE_DISTRIBUTED", "1"},
          {"PSTWIN_JOB_TOKEN", "the secret of the node tests' jobs"}};
}

Env worker_env(int rank, int port) {
  Env env = job_env("worker", port);
  env["DMLC_WORKER_ID"] = std::to_string(rank);
  return env;
}

const std::vector<std::string> kQuickstart{"--scenario", "scenarios/quickstart.toml", "--set",
                                           "workload.iterations=2"};

// A shared-memory object, as a node killed with -9 leaves it; removed at the end of the test.
class LeftoverObject {
 public:
  explicit LeftoverObject(std::string name) : name_("/" + std::move(name)) {
    const int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      [[maybe_unused]] const int sized = ::ftruncate(fd, 4096);
      ::close(fd);
    }
  }
  ~LeftoverObject() { ::shm_unlink(name_.c_str()); }
  LeftoverObject(const LeftoverObject&) = delete;
  LeftoverObject& operator=(const LeftoverObject&) = delete;
  bool exists() const { return std::filesystem::exists("/dev/shm" + name_); }

 private:
  std::string name_;
};

TEST(Node, FourTerminalLaunchCompletes) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();  // free for the scheduler
  // What a worker of an earlier job on this port, killed with -9, left behind; and another port's.
  const LeftoverObject leftover("pstwin_" + std::to_string(port) + "_worker_0_key_1");
  const LeftoverObject other_port("pstwin_" + std::to_string(port) + "0_worker_0_key_1");
  ASSERT_TRUE(leftover.exists());
  ASSERT_TRUE(other_port.exists());
  // The declaration order is the reverse of destruction: any child left running is killed.
  NodeProcess scheduler("scheduler", job_env("scheduler", port), kQuickstart);
  NodeProcess server("server", job_env("server", port), kQuickstart);
  NodeProcess worker0("worker0", worker_env(0, port), kQuickstart);
  NodeProcess worker1("worker1", worker_env(1, port), kQuickstart);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  struct Expect {
    NodeProcess& process;
    std::string summary;
  };
  for (auto [process, summary] : {Expect{scheduler, "pstwin node: scheduler rank 0 (node 1)"},
                                  Expect{server, "pstwin node: server rank 0 (node 8)"},
                                  Expect{worker0, "pstwin node: worker rank 0 (node 9): 2 iterations"},
                                  Expect{worker1, "pstwin node: worker rank 1 (node 11): 2 iterations"}}) {
    EXPECT_EQ(process.wait_until(deadline), 0) << process.output();
    EXPECT_NE(process.output().find(summary), std::string::npos) << process.output();
    EXPECT_NE(process.output().find(" 0 violations: ok"), std::string::npos) << process.output();
  }
  // The scheduler removed the leftover under its port, and nothing under another port.
  EXPECT_FALSE(leftover.exists());
  EXPECT_TRUE(other_port.exists());
  EXPECT_NE(
      scheduler.output().find("removed 1 staging object(s) /dev/shm/pstwin_" + std::to_string(port) + "_*"),
      std::string::npos)
      << scheduler.output();
  // Every staging object was unlinked by the worker that created it.
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_EQ(entry.path().filename().string().find("pstwin_" + std::to_string(port) + "_"),
              std::string::npos)
        << entry.path();
}

// FILE as the other commands take it, --scenario as before (not both); -q: nothing on success.
TEST(Node, ScenarioAsFileOrOptionAndQuietSuccessPrintsNothing) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  // crossed_line runs 10 iterations, the default quickstart 5: the summaries tell which file was read.
  const std::string file = "scenarios/crossed_line.toml";
  NodeProcess scheduler("scheduler-file", job_env("scheduler", port), {file, "-q"});
  NodeProcess server("server-file", job_env("server", port), {"--scenario", file, "-q"});
  NodeProcess worker0("worker0-file", worker_env(0, port), {file});
  NodeProcess worker1("worker1-file", worker_env(1, port), {"--scenario", file, "--quiet"});
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (NodeProcess* node : {&scheduler, &server, &worker0, &worker1})
    EXPECT_EQ(node->wait_until(deadline), 0) << node->output();
  EXPECT_NE(worker0.output().find("pstwin node: worker rank 0 (node 9): 10 iterations"), std::string::npos)
      << worker0.output();
  EXPECT_EQ(scheduler.output(), "");
  EXPECT_EQ(server.output(), "");
  EXPECT_EQ(worker1.output(), "");

  NodeProcess both("both", worker_env(0, port), {file, "--scenario", file});
  EXPECT_EQ(both.wait_until(Clock::now() + std::chrono::seconds(5)), 2) << both.output();
  EXPECT_NE(both.output().find("--scenario"), std::string::npos) << both.output();
}

// The environment of worker 0, the only worker of its job, on a port nothing listens on (reserved, then
// freed): what a node's own checks of its configuration run on.
Env lone_worker_env() {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  Env env = worker_env(0, port);
  env["DMLC_NUM_WORKER"] = "1";
  return env;
}

// Without PSTWIN_JOB_TOKEN a node says it runs unauthenticated; a scenario with ps.require_token
// makes that a bad configuration (exit 2 naming the variable and the field), and a token too short
// to be a secret is refused without being printed.
TEST(Node, WithoutATokenANodeSaysSoAndRequireTokenRefusesToStart) {
  Env env = lone_worker_env();
  env.erase("PSTWIN_JOB_TOKEN");
  NodeProcess required("required", env,
                       {"--scenario", "scenarios/quickstart.toml", "--set", "ps.require_token=true"});
  EXPECT_EQ(required.wait_until(Clock::now() + std::chrono::seconds(10)), 2) << required.output();
  EXPECT_NE(required.output().find("PSTWIN_JOB_TOKEN is not set"), std::string::npos) << required.output();
  EXPECT_NE(required.output().find("ps.require_token"), std::string::npos) << required.output();

  env["PSTWIN_JOB_TOKEN"] = "short-secret";
  NodeProcess short_token("short", env, kQuickstart);
  EXPECT_EQ(short_token.wait_until(Clock::now() + std::chrono::seconds(10)), 2) << short_token.output();
  EXPECT_NE(short_token.output().find("PSTWIN_JOB_TOKEN has 12 characters"), std::string::npos)
      << short_token.output();
  EXPECT_EQ(short_token.output().find("short-secret"), std::string::npos) << short_token.output();

  env.erase("PSTWIN_JOB_TOKEN");
  std::vector<std::string> args = kQuickstart;
  args.insert(args.end(), {"--set", "ps.connect_timeout=0.3"});
  NodeProcess open("open", env, args);  // no scheduler: it gives up after the connect timeout
  EXPECT_EQ(open.wait_until(Clock::now() + std::chrono::seconds(20)), 1) << open.output();
  EXPECT_NE(open.output().find("PSTWIN_JOB_TOKEN is not set: this node runs unauthenticated"),
            std::string::npos)
      << open.output();
}

// `pstwin node` with PSTWIN_ENCRYPT=curve: refused (exit 2) without the token its keys come from or on
// a van without CURVE, naming the variable; with both it says once that its traffic is encrypted, and
// a node without it that its traffic is not.
TEST(Encryption, NodeRefusesCurveWithoutATokenOrOnTheEpollVanAndSaysWhetherItEncrypts) {
  Env env = lone_worker_env();
  env["PSTWIN_ENCRYPT"] = "curve";
  Env no_token = env;
  no_token.erase("PSTWIN_JOB_TOKEN");
  NodeProcess without_token("no-token", no_token, kQuickstart);
  EXPECT_EQ(without_token.wait_until(Clock::now() + std::chrono::seconds(10)), 2) << without_token.output();
  EXPECT_NE(without_token.output().find("PSTWIN_ENCRYPT=curve needs PSTWIN_JOB_TOKEN"), std::string::npos)
      << without_token.output();
  Env epoll = env;
  epoll["DMLC_PS_VAN_TYPE"] = "epoll";
  NodeProcess on_epoll("epoll", epoll, kQuickstart);
  EXPECT_EQ(on_epoll.wait_until(Clock::now() + std::chrono::seconds(10)), 2) << on_epoll.output();
  EXPECT_NE(on_epoll.output().find("DMLC_PS_VAN_TYPE=epoll: the epoll van cannot encrypt"), std::string::npos)
      << on_epoll.output();

  std::vector<std::string> args = kQuickstart;
  args.insert(args.end(), {"--set", "ps.connect_timeout=0.3"});
  NodeProcess encrypted("encrypted", env, args);  // no scheduler: it gives up after the connect timeout
  EXPECT_EQ(encrypted.wait_until(Clock::now() + std::chrono::seconds(20)), 1) << encrypted.output();
  EXPECT_NE(encrypted.output().find("traffic is encrypted (ZeroMQ CURVE"), std::string::npos)
      << encrypted.output();
  env.erase("PSTWIN_ENCRYPT");
  NodeProcess plain("plain", env, args);
  EXPECT_EQ(plain.wait_until(Clock::now() + std::chrono::seconds(20)), 1) << plain.output();
  EXPECT_NE(plain.output().find("traffic is not encrypted"), std::string::npos) << plain.output();
}

// ps.require_encryption: a node without PSTWIN_ENCRYPT=curve refuses to start (exit 2, naming the
// variable and the field), and so does `pstwin run` without --encrypt curve, before any node starts.
TEST(Encryption, RequireEncryptionRefusesAnUnencryptedNodeOrRun) {
  Env env = lone_worker_env();
  NodeProcess node("require-encryption", env,
                   {"--scenario", "scenarios/quickstart.toml", "--set", "ps.require_encryption=true"});
  EXPECT_EQ(node.wait_until(Clock::now() + std::chrono::seconds(10)), 2) << node.output();
  EXPECT_NE(node.output().find("PSTWIN_ENCRYPT is not curve"), std::string::npos) << node.output();
  EXPECT_NE(node.output().find("ps.require_encryption"), std::string::npos) << node.output();

  const auto dir = testing::fresh_dir("require-encryption");
  const auto run = testing::run_pstwin(
      "run scenarios/quickstart.toml -q --set ps.require_encryption=true --out " + (dir / "run").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("ps.require_encryption = true and this job would run unencrypted: add --encrypt "
                            "curve"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "run" / "parts"));
}

// A node on its own keeps to run.time_limit (wall clock), not sim.max_time (simulated time).
TEST(Node, TimeLimitEndsANodeThatWaitsTooLong) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  // A scheduler whose workers never come: only the time limit ends it.
  const auto start = Clock::now();
  NodeProcess scheduler("scheduler-limit", job_env("scheduler", port),
                        {"scenarios/quickstart.toml", "-q", "--set", "run.time_limit=2s", "--set",
                         "sim.max_time=1ms", "--set", "ps.connect_timeout=60s"});
  EXPECT_EQ(scheduler.wait_until(start + std::chrono::seconds(20)), 1) << scheduler.output();
  EXPECT_GE(Clock::now() - start, std::chrono::seconds(2));
  // -q: a failure still says what happened, and the summary line with it.
  EXPECT_NE(scheduler.output().find("failure: run.time_limit of 2 s (wall clock) reached"), std::string::npos)
      << scheduler.output();
  EXPECT_NE(scheduler.output().find("pstwin node: scheduler"), std::string::npos) << scheduler.output();
}

TEST(Node, WorkerWithoutSchedulerFailsAfterConnectTimeout) {
  PortHolder reserved;  // nobody ever answers on it: a listening socket that never speaks ZMTP
  const int port = reserved.port();
  reserved.close();
  std::vector<std::string> args = kQuickstart;
  args.insert(args.end(), {"--set", "ps.connect_timeout=2s"});
  const auto start = Clock::now();
  NodeProcess worker("worker", worker_env(0, port), args);
  EXPECT_EQ(worker.wait_until(start + std::chrono::seconds(5)), 1) << worker.output();
  EXPECT_NE(worker.output().find("cannot reach the scheduler at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << worker.output();
}

TEST(Node, MisspelledRoleIsABadConfiguration) {
  NodeProcess node("wroker", job_env("wroker", 1234), kQuickstart);
  EXPECT_EQ(node.wait_until(Clock::now() + std::chrono::seconds(5)), 2) << node.output();
  EXPECT_NE(node.output().find("DMLC_ROLE=\"wroker\": expected scheduler, server or worker"),
            std::string::npos)
      << node.output();
}

TEST(Node, SchedulerPortInUseIsNamed) {
  PortHolder taken;
  NodeProcess scheduler("scheduler-taken", job_env("scheduler", taken.port()), kQuickstart);
  EXPECT_EQ(scheduler.wait_until(Clock::now() + std::chrono::seconds(5)), 2) << scheduler.output();
  EXPECT_NE(scheduler.output().find("cannot bind 127.0.0.1:" + std::to_string(taken.port()) +
                                    ": Address already in use; is another scheduler running? choose another "
                                    "DMLC_PS_ROOT_PORT"),
            std::string::npos)
      << scheduler.output();
}

// DMLC_NODE_PORT is the port a server or worker listens on: held by another socket, the node says so;
// free, the job runs on it.
TEST(Node, AServerListensOnItsNodePort) {
  PortHolder taken;
  Env server_env = job_env("server", 1);  // the scheduler is never reached: binding comes first
  server_env["DMLC_NODE_PORT"] = std::to_string(taken.port());
  NodeProcess refused("server-taken", server_env, kQuickstart);
  EXPECT_EQ(refused.wait_until(Clock::now() + std::chrono::seconds(5)), 2) << refused.output();
  EXPECT_NE(refused.output().find("cannot bind 127.0.0.1:" + std::to_string(taken.port()) +
                                  ": Address already in use; is another node using DMLC_NODE_PORT=" +
                                  std::to_string(taken.port()) + "? choose another"),
            std::string::npos)
      << refused.output();

  PortHolder reserved, server_port, worker_port;
  const int port = reserved.port();
  reserved.close();
  Env server = job_env("server", port);
  server["DMLC_NODE_PORT"] = std::to_string(server_port.port());
  Env worker = worker_env(0, port);
  worker["DMLC_NODE_PORT"] = std::to_string(worker_port.port());
  server_port.close();
  worker_port.close();
  NodeProcess scheduler("scheduler", job_env("scheduler", port), kQuickstart);
  NodeProcess server_process("server", server, kQuickstart);
  NodeProcess worker0("worker0", worker, kQuickstart);
  NodeProcess worker1("worker1", worker_env(1, port), kQuickstart);  // a free port
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (NodeProcess* process : {&scheduler, &server_process, &worker0, &worker1})
    EXPECT_EQ(process->wait_until(deadline), 0) << process->output();
}

bool has_staging_object(const std::string& prefix) {
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().starts_with(prefix)) return true;
  return false;
}

TEST(Node, SigtermAndSigintStopANodeCleanlyAndUnlinkItsStaging) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  const std::string prefix = "pstwin_" + std::to_string(port) + "_";
  // Long enough that every node is still training when it is told to stop.
  const std::vector<std::string> args{"--scenario", "scenarios/quickstart.toml", "--set",
                                      "workload.iterations=1000000"};
  NodeProcess scheduler("scheduler-signal", job_env("scheduler", port), args);
  NodeProcess server("server-signal", job_env("server", port), args);
  NodeProcess worker0("worker0-signal", worker_env(0, port), args);
  NodeProcess worker1("worker1-signal", worker_env(1, port), args);
  const auto started = Clock::now();
  while (!has_staging_object(prefix) && Clock::now() < started + std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(has_staging_object(prefix)) << "no staging object after 30 s\n" << worker0.output();

  // A plain `kill`: the worker stops as a failed node would, reports why, and exits 128 + SIGTERM.
  ASSERT_EQ(::kill(worker0.pid(), SIGTERM), 0);
  EXPECT_EQ(worker0.wait_until(Clock::now() + std::chrono::seconds(15)), 128 + SIGTERM) << worker0.output();
  EXPECT_NE(worker0.output().find("interrupted by SIGTERM"), std::string::npos) << worker0.output();
  EXPECT_NE(worker0.output().find("pstwin node: worker rank 0"), std::string::npos) << worker0.output();

  // Ctrl-C on the rest (any of them may already have failed on worker 0's departure): each ends
  // with its summary line, none killed by the signal.
  for (NodeProcess* node : {&worker1, &server, &scheduler}) {
    ::kill(node->pid(), SIGINT);
    const auto code = node->wait_until(Clock::now() + std::chrono::seconds(15));
    ASSERT_TRUE(code.has_value()) << node->output();
    EXPECT_NE(*code, 0) << node->output();
    EXPECT_NE(node->output().find("pstwin node: "), std::string::npos) << node->output();
  }
  EXPECT_FALSE(has_staging_object(prefix)) << "a stopped worker left staging objects with prefix " << prefix;
}

// ---------------------------------------------------------------- failure propagation

// A 4-node job (scheduler, 1 server, 2 workers) long enough to be mid-run when a node goes, with short
// heartbeats so a death is noticed within a second or two.
class FailureJob {
 public:
  explicit FailureJob(const std::string& tag, const std::string& heartbeat_timeout = "1s",
                      const std::vector<std::string>& sets = {"workload.iterations=1000000"})
      : port_(free_port()),
        args_{with_sets({"--scenario", "scenarios/quickstart.toml", "--set", "ps.heartbeat_interval=200ms",
                         "--set", "ps.heartbeat_timeout=" + heartbeat_timeout},
                        sets)},
        scheduler_("scheduler-" + tag, job_env("scheduler", port_), args_),
        server_("server-" + tag, job_env("server", port_), args_),
        worker0_("worker0-" + tag, worker_env(0, port_), args_),
        worker1_("worker1-" + tag, worker_env(1, port_), args_) {}
  ~FailureJob() {
    // kill -9 leaves the killed worker's staging objects (the next scheduler on the port would sweep them).
    realnet::ShmStaging::unlink_all(realnet::job_staging_prefix(port_));
  }
  FailureJob(const FailureJob&) = delete;
  FailureJob& operator=(const FailureJob&) = delete;

  // True once both workers are pushing: each stages its tensors in shared memory first.
  bool wait_until_running() {
    const std::string prefix = realnet::job_staging_prefix(port_);
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < until) {
      int workers = 0;
      for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with(prefix)) continue;
        if (name.find("worker_0_") != std::string::npos) workers |= 1;
        if (name.find("worker_1_") != std::string::npos) workers |= 2;
      }
      if (workers == 3) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  int port() const { return port_; }
  NodeProcess& scheduler() { return scheduler_; }
  NodeProcess& server() { return server_; }
  NodeProcess& worker(int rank) { return rank == 0 ? worker0_ : worker1_; }
  std::vector<NodeProcess*> all() { return {&scheduler_, &server_, &worker0_, &worker1_}; }

 private:
  static std::vector<std::string> with_sets(std::vector<std::string> args,
                                            const std::vector<std::string>& sets) {
    for (const auto& set : sets) {
      args.emplace_back("--set");
      args.push_back(set);
    }
    return args;
  }
  static int free_port() {
    PortHolder reserved;
    return reserved.port();  // closed again as `reserved` goes: free for the scheduler
  }
  int port_;
  std::vector<std::string> args_;
  // Destroyed in reverse: any child still running is killed.
  NodeProcess scheduler_;
  NodeProcess server_;
  NodeProcess worker0_;
  NodeProcess worker1_;
};

// Every node but `gone` ends by `deadline`, non-zero, its output naming `named`; returns how long the
// slowest took after `since`.
double expect_all_end_naming(FailureJob& job, NodeProcess* gone, const std::string& named,
                             Clock::time_point since, Clock::time_point deadline) {
  double slowest_s = 0;
  for (NodeProcess* node : job.all()) {
    if (node == gone) continue;
    const auto code = node->wait_until(deadline);
    slowest_s = std::max(slowest_s, std::chrono::duration<double>(Clock::now() - since).count());
    EXPECT_TRUE(code.has_value()) << "still running " << slowest_s << " s after the failure:\n"
                                  << node->output();
    if (!code) continue;
    EXPECT_NE(*code, 0) << node->output();
    EXPECT_NE(node->output().find(named), std::string::npos) << "expected \"" << named << "\" in:\n"
                                                             << node->output();
  }
  return slowest_s;
}

// kill -9 of one node mid-run: the scheduler notices the silence within ps.heartbeat_timeout and tells
// every other node, or (the scheduler killed) each node notices that the scheduler went silent.
void kill_mid_run(const std::string& tag, const std::function<NodeProcess&(FailureJob&)>& victim,
                  const std::function<std::string(FailureJob&)>& named) {
  FailureJob job(tag);
  ASSERT_TRUE(job.wait_until_running()) << job.worker(0).output() << job.worker(1).output();
  NodeProcess& killed = victim(job);
  const auto at = Clock::now();
  ASSERT_EQ(::kill(killed.pid(), SIGKILL), 0);
  ASSERT_EQ(killed.wait_until(at + std::chrono::seconds(5)), 128 + SIGKILL);
  // ps.heartbeat_timeout (1 s) + 5 s.
  const double took_s = expect_all_end_naming(job, &killed, named(job), at, at + std::chrono::seconds(6));
  ::testing::Test::RecordProperty("slowest_end_s", std::to_string(took_s));
}

TEST(NodeFailure, KilledWorkerEndsEveryOtherNodeNamingIt) {
  kill_mid_run(
      "kill-worker", [](FailureJob& job) -> NodeProcess& { return job.worker(1); },
      [](FailureJob&) { return std::string("worker 1 (node 11 at 127.0.0.1:"); });
}

TEST(NodeFailure, KilledServerEndsEveryOtherNodeNamingIt) {
  kill_mid_run(
      "kill-server", [](FailureJob& job) -> NodeProcess& { return job.server(); },
      [](FailureJob&) { return std::string("server 0 (node 8 at 127.0.0.1:"); });
}

TEST(NodeFailure, KilledSchedulerEndsEveryOtherNodeNamingIt) {
  kill_mid_run(
      "kill-scheduler", [](FailureJob& job) -> NodeProcess& { return job.scheduler(); },
      [](FailureJob& job) {
        return "the scheduler (node 1 at 127.0.0.1:" + std::to_string(job.port()) + ") sent nothing for";
      });
}

// A plain `kill` of a worker: it tells the scheduler it is leaving, so the others end at once, long
// before the (default, 10 s) heartbeat timeout could have noticed.
TEST(NodeFailure, SigtermedWorkerEndsTheOthersPromptlyNamingIt) {
  FailureJob job("term-worker", "10s");
  ASSERT_TRUE(job.wait_until_running()) << job.worker(0).output() << job.worker(1).output();
  const auto at = Clock::now();
  ASSERT_EQ(::kill(job.worker(0).pid(), SIGTERM), 0);
  EXPECT_EQ(job.worker(0).wait_until(at + std::chrono::seconds(5)), 128 + SIGTERM) << job.worker(0).output();
  const double took_s = expect_all_end_naming(job, &job.worker(0), "worker 0 (node 9 at 127.0.0.1:", at,
                                              at + std::chrono::seconds(4));
  ::testing::Test::RecordProperty("slowest_end_s", std::to_string(took_s));
  EXPECT_NE(job.server().output().find("interrupted by SIGTERM"), std::string::npos) << job.server().output();
}

// ps.on_worker_loss = "continue": kill -9 of a worker mid-run; the scheduler declares it dead after the
// heartbeat timeout, tells the server, and the job finishes with the surviving worker, every node but
// the killed one exiting 0.
TEST(NodeFailure, KilledWorkerWithContinueLetsTheJobFinishWithTheSurvivor) {
  FailureJob job("continue-worker", "1s", {"workload.iterations=150", "ps.on_worker_loss=continue"});
  ASSERT_TRUE(job.wait_until_running()) << job.worker(0).output() << job.worker(1).output();
  const auto at = Clock::now();
  ASSERT_EQ(::kill(job.worker(1).pid(), SIGKILL), 0);
  ASSERT_EQ(job.worker(1).wait_until(at + std::chrono::seconds(5)), 128 + SIGKILL);
  for (NodeProcess* node : {&job.scheduler(), &job.server(), &job.worker(0)}) {
    const auto code = node->wait_until(at + std::chrono::seconds(90));
    ASSERT_TRUE(code.has_value()) << "still running 90 s after the kill:\n" << node->output();
    EXPECT_EQ(*code, 0) << node->output();
  }
  EXPECT_NE(job.scheduler().output().find("worker 1 (node 11 at 127.0.0.1:"), std::string::npos)
      << job.scheduler().output();
  EXPECT_NE(job.scheduler().output().find("the job goes on with 1 worker(s)"), std::string::npos)
      << job.scheduler().output();
  EXPECT_NE(job.server().output().find("worker 1 was declared dead; going on without it"), std::string::npos)
      << job.server().output();
}

// ps.backup_workers = 1: a worker stopped (SIGSTOP) for the rest of the job costs it nothing the
// heartbeat timeout would see: the other worker's rounds close without it and the job finishes while
// the stopped one is still silent; had it taken longer than ps.heartbeat_timeout, the scheduler would
// have declared the stopped worker dead and failed the job. Resumed, the straggler is shut down too.
// The timeout is 60 s so that the 60 iterations fit it in a sanitizer build on a loaded machine too
// (after the stop they took 2.8 s in a release build at load 3; under ASan at load 6, 10 s were not enough).
TEST(NodeFailure, StoppedWorkerWithABackupWorkerCostsLessThanAHeartbeatTimeout) {
  FailureJob job("stop-worker", "60s", {"workload.iterations=60", "ps.backup_workers=1"});
  ASSERT_TRUE(job.wait_until_running()) << job.worker(0).output() << job.worker(1).output();
  const auto at = Clock::now();
  ASSERT_EQ(::kill(job.worker(1).pid(), SIGSTOP), 0);
  const auto code = job.worker(0).wait_until(at + std::chrono::seconds(90));
  const double took_s = std::chrono::duration<double>(Clock::now() - at).count();
  ASSERT_EQ(::kill(job.worker(1).pid(), SIGCONT), 0);
  ASSERT_TRUE(code.has_value()) << "worker 0 still running 90 s after worker 1 stopped:\n"
                                << job.worker(0).output();
  EXPECT_EQ(*code, 0) << job.worker(0).output();
  ::testing::Test::RecordProperty("worker0_end_after_stop_s", std::to_string(took_s));
  for (NodeProcess* node : {&job.scheduler(), &job.server(), &job.worker(1)}) {
    const auto ended = node->wait_until(Clock::now() + std::chrono::seconds(30));
    ASSERT_TRUE(ended.has_value()) << node->output();
    EXPECT_EQ(*ended, 0) << node->output();
  }
  EXPECT_EQ(job.scheduler().output().find("presumed dead"), std::string::npos) << job.scheduler().output();
}

// The digest the scheduler compares: of the scenario as `pstwin node` resolves it from `env` and `sets`.
std::string digest_for(const Env& env, const std::vector<std::pair<std::string, std::string>>& sets) {
  auto overrides = realnet::parse_node_env(env).scenario_overrides();
  overrides.insert(overrides.end(), sets.begin(), sets.end());
  return job_digest(load_scenario(std::string(PSTWIN_SOURCE_DIR) + "/scenarios/quickstart.toml", overrides));
}

// A worker started with another scenario is refused at registration, exit 2, naming both digests and the
// field; the job is unaffected: a worker with the right scenario takes its place and the job completes.
TEST(NodeFailure, MismatchedScenarioIsRefusedAtRegistrationNamingBothDigests) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  const std::vector<std::string> wrong{"--scenario", "scenarios/quickstart.toml", "--set",
                                       "workload.iterations=3"};
  NodeProcess scheduler("scheduler-mismatch", job_env("scheduler", port), kQuickstart);
  NodeProcess server("server-mismatch", job_env("server", port), kQuickstart);
  NodeProcess worker0("worker0-mismatch", worker_env(0, port), kQuickstart);
  NodeProcess stranger("worker1-mismatch", worker_env(1, port), wrong);
  EXPECT_EQ(stranger.wait_until(Clock::now() + std::chrono::seconds(15)), 2) << stranger.output();
  const std::string job = digest_for(worker_env(1, port), {{"workload.iterations", "2"}});
  const std::string its = digest_for(worker_env(1, port), {{"workload.iterations", "3"}});
  ASSERT_NE(job, its);
  const std::string out = stranger.output();
  EXPECT_NE(out.find("refused the registration of worker 1"), std::string::npos) << out;
  EXPECT_NE(out.find("this node's scenario digest " + its + " differs from the job's " + job),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("workload.iterations = 3 here, 2 in the job"), std::string::npos) << out;
  EXPECT_NE(scheduler.output().find("refused the registration of worker"), std::string::npos)
      << scheduler.output();

  NodeProcess worker1("worker1-mismatch-fixed", worker_env(1, port), kQuickstart);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (NodeProcess* node : {&scheduler, &server, &worker0, &worker1})
    EXPECT_EQ(node->wait_until(deadline), 0) << node->output();
}

std::string unique_prefix(const std::string& what) {
  return "pstwin_test_" + std::to_string(::getpid()) + "_" + what + "_";
}

TEST(Node, ShmStagingSharesEqualNamesAcrossInstances) {
  // Two ShmStaging objects stand in for two processes: only the name connects them.
  realnet::ShmStaging a(unique_prefix("share"));
  realnet::ShmStaging b(unique_prefix("share"));
  auto x = a.open("BytePS_ShM_7", 64);
  auto y = b.open("BytePS_ShM_7", 64);
  auto other = b.open("job0/worker/1/7", 64);
  ASSERT_EQ(x->size(), 64u);
  x->floats()[3] = 42.0f;
  EXPECT_EQ(y->floats()[3], 42.0f);
  EXPECT_EQ(other->floats()[3], 0.0f);
  EXPECT_EQ(a.open("BytePS_ShM_7", 64), x);  // reopening in one process returns the same buffer
  EXPECT_EQ(a.created(), 1u);
  EXPECT_EQ(b.created(), 1u);
  EXPECT_EQ(b.object_name("job0/worker/1/7"), "/" + unique_prefix("share") + "job0_worker_1_7");
}

// One job's objects on one host share a prefix, under the job's prefix that the sweeps remove; the host
// part cannot run into the buffer name ('_' ends it) nor hold a '/'.
TEST(Node, ShmStagingPrefixesAreTheJobsAndTheHosts) {
  EXPECT_EQ(realnet::job_staging_prefix(1234), "pstwin_1234_");
  EXPECT_EQ(realnet::host_staging_prefix(1234, "h1"), "pstwin_1234_h1_");
  EXPECT_EQ(realnet::host_staging_prefix(1234, "node_7/a.b"), "pstwin_1234_node-7-a.b_");
  EXPECT_TRUE(realnet::host_staging_prefix(1234, "h10").starts_with(realnet::job_staging_prefix(1234)));
  // Equal buffer names on two hosts are two objects; on one host, one.
  realnet::ShmStaging h0(realnet::host_staging_prefix(1234, unique_prefix("h0")));
  realnet::ShmStaging h1(realnet::host_staging_prefix(1234, unique_prefix("h1")));
  realnet::ShmStaging h1_again(realnet::host_staging_prefix(1234, unique_prefix("h1")));
  auto a = h0.open("BytePS_ShM_7", 64);
  auto b = h1.open("BytePS_ShM_7", 64);
  auto c = h1_again.open("BytePS_ShM_7", 64);
  b->floats()[0] = 5.0f;
  EXPECT_EQ(c->floats()[0], 5.0f);
  EXPECT_EQ(a->floats()[0], 0.0f);
}

TEST(Node, ShmStagingUnlinksWhatItCreated) {
  const std::string prefix = unique_prefix("unlink");
  std::shared_ptr<ByteBuffer> kept;
  std::string path;
  {
    realnet::ShmStaging staging(prefix);
    kept = staging.open("k", 4096);
    path = "/dev/shm" + staging.object_name("k");
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  kept->bytes()[4095] = std::byte{1};  // the mapping outlives the name
  EXPECT_EQ(kept->bytes()[4095], std::byte{1});
}

// ---------------------------------------------------------------- pstwin merge

// A hand-launched job (scheduler, 1 server, 2 workers, 2 iterations) whose nodes write their reports
// to `dir`: the scheduler and the server to DIR/ (named by role and rank), the workers to files.
void hand_launched_job(const std::string& tag, const std::filesystem::path& dir) {
  PortHolder reserved;
  const int port = reserved.port();
  reserved.close();
  auto with_report = [&](const std::string& report) {
    std::vector<std::string> args = kQuickstart;
    args.insert(args.end(), {"--report", report, "-q"});
    return args;
  };
  NodeProcess scheduler("scheduler-" + tag, job_env("scheduler", port), with_report(dir.string() + "/"));
  NodeProcess server("server-" + tag, job_env("server", port), with_report(dir.string() + "/"));
  NodeProcess worker0("worker0-" + tag, worker_env(0, port), with_report((dir / "w0.json").string()));
  NodeProcess worker1("worker1-" + tag, worker_env(1, port), with_report((dir / "w1.json").string()));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (NodeProcess* node : {&scheduler, &server, &worker0, &worker1})
    ASSERT_EQ(node->wait_until(deadline), 0) << node->output();
}

// The Done-when of the launchers: the reports of a job started by hand merge into the simulator's
// final model, with the job's iterations, checks and one trace.
TEST(Merge, HandLaunchedJobGivesTheSimulatorsModelDigest) {
  const auto dir = testing::fresh_dir("merge-hand");
  ASSERT_NO_FATAL_FAILURE(hand_launched_job("merge", dir / "parts"));
  EXPECT_TRUE(std::filesystem::exists(dir / "parts" / "scheduler.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "parts" / "server0.json"));
  const auto merged =
      testing::run_pstwin("merge " + (dir / "parts").string() + " --out " + (dir / "real").string());
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  EXPECT_NE(merged.output.find("4 node reports merged"), std::string::npos) << merged.output;
  const std::string digest = testing::simulated_digest(
      "scenarios/quickstart.toml --set workload.iterations=2 --set roles.workers=2 --set roles.servers=1",
      dir / "sim");
  const auto real = testing::read_json(dir / "real" / "results.json");
  EXPECT_EQ(real["model_digest"], digest);
  EXPECT_EQ(real["backend"], "real");
  EXPECT_TRUE(real["completed"].get<bool>()) << real.dump();
  EXPECT_EQ(real["iterations"].size(), 2u);
  EXPECT_GT(real["invariants"]["checked"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(real["invariants"]["violation_count"], 0);
  EXPECT_EQ(real["nodes"].size(), 3u);  // the scheduler's table: 1 server, 2 workers
  // One trace: a process per node.
  const auto trace = testing::read_json(dir / "real" / "trace.json");
  std::set<int> processes;
  for (const auto& event : trace["traceEvents"])
    if (event.contains("pid")) processes.insert(event["pid"].get<int>());
  EXPECT_EQ(processes.size(), 4u) << trace.dump().substr(0, 2000);
  // Merged again without --out: next to the reports, which are still the only parts read.
  const auto again = testing::run_pstwin("merge -q " + (dir / "parts").string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, "");
  EXPECT_EQ(testing::read_json(dir / "parts" / "results.json")["model_digest"], digest);
  const auto twice = testing::run_pstwin("merge -q " + (dir / "parts").string());
  EXPECT_EQ(twice.exit_code, 0) << twice.output;
}

// What cannot be merged is refused naming the file and the fix; a missing node is a warning naming it.
TEST(Merge, RefusesForeignDuplicateAndMalformedReportsAndNamesMissingNodes) {
  const auto dir = testing::fresh_dir("merge-bad");
  ASSERT_NO_FATAL_FAILURE(hand_launched_job("merge-bad", dir / "parts"));
  namespace fs = std::filesystem;
  // Each case: a fresh copy of the job's reports, changed.
  auto variant = [&](const std::string& name) {
    const auto copy = dir / name;
    fs::copy(dir / "parts", copy);
    return copy;
  };
  auto merge = [&](const fs::path& parts) { return testing::run_pstwin("merge -q " + parts.string()); };

  const auto malformed = variant("malformed");
  std::ofstream(malformed / "notes.json") << "{\"role\": \"worker\", \"rank\": ";
  auto r = merge(malformed);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((malformed / "notes.json").string() + ": not a node report"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("remove it from the directory"), std::string::npos) << r.output;

  const auto duplicate = variant("duplicate");
  fs::copy_file(duplicate / "w1.json", duplicate / "w1-again.json");
  r = merge(duplicate);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("two reports of one node"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("w1-again.json"), std::string::npos) << r.output;

  // A report of another job on another port: its scheduler differs.
  const auto foreign = variant("foreign");
  auto part = testing::read_json(foreign / "w0.json");
  part["scheduler"] = "127.0.0.1:1";
  std::ofstream(foreign / "w0.json") << part.dump();
  r = merge(foreign);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((foreign / "w0.json").string() + ": a report of another job: its scheduler is "
                                                           "\"127.0.0.1:1\""),
            std::string::npos)
      << r.output;
  // ... and one of the same scheduler address but another run: not at its address in the node table.
  part = testing::read_json(dir / "parts" / "w0.json");
  part["address"] = "127.0.0.1:2";
  std::ofstream(foreign / "w0.json") << part.dump();
  r = merge(foreign);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not in the node table of"), std::string::npos) << r.output;

  const auto missing = variant("missing");
  fs::remove(missing / "w1.json");
  r = testing::run_pstwin("merge " + missing.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("pstwin merge: warning: no report from worker 1 in"), std::string::npos)
      << r.output;
  EXPECT_FALSE(testing::read_json(missing / "results.json")["completed"].get<bool>());

  r = merge(dir / "empty");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // no such directory
  fs::create_directories(dir / "empty");
  r = merge(dir / "empty");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no node reports (*.json) in it"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace pstwin
