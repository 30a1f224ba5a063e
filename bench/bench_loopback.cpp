// Loopback bench of the real backend against raw TCP, in one run: 1 scheduler, 1 server and 2
// workers as in-process nodes on 127.0.0.1 (realnet::run_local) over the chosen van (epoll, the
// default, zmq or ucx), values of 4 KB, 1 MB and 16 MB.
//  - blocking latency: one value per iteration (push, ack, pull, response; sync mode, so each
//    iteration waits for both workers), p50/p99 of the slowest worker's iteration time;
//  - pipelined aggregate: many values per iteration, pushes bounded by ps.scheduling_credit,
//    (push + pull bytes of both workers) / time;
//  - raw TCP on 127.0.0.1 (TCP_NODELAY): a ping-pong echoing the same size (latency), one
//    streaming connection writing that size per write() (throughput; the ratio's denominator), and
//    four such connections at once (the PS's two pushes and two replies, without the PS).
// It prints both and the ratio, with the CPU seconds (user+sys) each phase used and the load
// average: on a shared machine, wall times are noisy. Usage:
//   bench_loopback [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--credit N] [--quick]
//                  [--only latency|pipelined|tcp] [--set FIELD=VALUE]... [--auth-ab N]
//                  [--encrypt-ab N] [--shared-loops-ab N] [--loop-threads N]
//                  [--vans zmq,epoll,ucx,ucx:TLS [--rounds N]]
// --auth-ab N: instead, the cost of job authentication (PSTWIN_JOB_TOKEN): N rounds per size, each
// measuring blocking latency and pipelined throughput with a token and without, in alternating
// order; prints the medians of each and their ratio.
// --encrypt-ab N: the same for encryption (PSTWIN_ENCRYPT=curve, the zmq van): encrypted against
// plain, both with a token.
// --shared-loops-ab N: the same for the epoll van's loop pool (realnet/loop_pool.hpp) against a loop
// thread per node. --loop-threads N: the pool's threads (default: one per usable CPU).
// --vans LIST: instead, the vans of LIST side by side, interleaved over --rounds rounds (3); "ucx:TLS"
// is the ucx van with UCX_TLS=TLS (ucx:tcp is UCX over TCP; plain ucx takes UCX_TLS as found, by
// default shared memory between these co-located nodes).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "realnet/local_run.hpp"
#include "scenario/scenario.hpp"
#include "scenario/units.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Overrides = std::vector<std::pair<std::string, std::string>>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds (user + sys) this process used so far.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size()))) - 1;
  return values[std::min(index, values.size() - 1)];
}

std::string size_text(std::uint64_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + "MB";
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + "KB";
  return std::to_string(bytes) + "B";
}

// ---------------------------------------------------------------- raw TCP

// An owned socket descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void sys_error(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

void set_nodelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) sys_error("TCP_NODELAY");
}

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      sys_error("send");
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// False at end of stream.
bool read_all(int fd, char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      sys_error("recv");
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// A connected pair over 127.0.0.1 (a listener on an ephemeral port, closed once accepted).
std::pair<Fd, Fd> tcp_pair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) sys_error("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) sys_error("bind 127.0.0.1:0");
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) sys_error("getsockname");
  if (::listen(listener.get(), 1) != 0) sys_error("listen");
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (client.get() < 0) sys_error("socket");
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) sys_error("connect");
  Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (server.get() < 0) sys_error("accept");
  set_nodelay(client.get());
  set_nodelay(server.get());
  return {std::move(client), std::move(server)};
}

// Round trips of `size` bytes each way (the peer echoes), seconds each.
std::vector<double> tcp_ping_pong(std::uint64_t size, int rounds) {
  auto [client, server] = tcp_pair();
  std::jthread echo([fd = server.get(), size] {
    std::vector<char> buffer(size);
    while (read_all(fd, buffer.data(), size)) write_all(fd, buffer.data(), size);
  });
  std::vector<char> out(size, 'x');
  std::vector<char> in(size);
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    write_all(client.get(), out.data(), size);
    if (!read_all(client.get(), in.data(), size)) throw std::runtime_error("echo peer closed");
    times.push_back(seconds_since(start));
  }
  ::shutdown(client.get(), SHUT_WR);  // ends the echo loop
  return times;
}

// One connection streaming `total` bytes in writes of `size`; bytes per second.
double tcp_stream(std::uint64_t size, std::uint64_t total) {
  auto [client, server] = tcp_pair();
  const std::uint64_t chunks = std::max<std::uint64_t>(1, total / size);
  std::jthread sink([fd = server.get(), size] {
    std::vector<char> buffer(std::max<std::uint64_t>(size, 1 << 20));
    while (::recv(fd, buffer.data(), buffer.size(), 0) > 0) {
    }
  });
  std::vector<char> out(size, 'x');
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < chunks; ++i) write_all(client.get(), out.data(), size);
  ::shutdown(client.get(), SHUT_WR);
  sink.join();  // the last byte is received, not just queued
  return static_cast<double>(chunks * size) / seconds_since(start);
}

// The PS bench's traffic without the PS: four connections streaming at once, as the two workers'
// pushes to the server and the server's replies to both (`total` bytes in all, writes of `size`,
// one sending and one receiving thread per connection); bytes per second over all four.
double tcp_streams_x4(std::uint64_t size, std::uint64_t total) {
  constexpr int kStreams = 4;
  const std::uint64_t chunks = std::max<std::uint64_t>(1, total / kStreams / size);
  std::vector<std::pair<Fd, Fd>> pairs;
  for (int i = 0; i < kStreams; ++i) pairs.push_back(tcp_pair());
  const auto start = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (auto& [client, server] : pairs) {
      threads.emplace_back([fd = server.get(), size] {
        std::vector<char> buffer(std::max<std::uint64_t>(size, 1 << 20));
        while (::recv(fd, buffer.data(), buffer.size(), 0) > 0) {
        }
      });
      threads.emplace_back([fd = client.get(), size, chunks] {
        std::vector<char> out(size, 'x');
        for (std::uint64_t i = 0; i < chunks; ++i) write_all(fd, out.data(), size);
        ::shutdown(fd, SHUT_WR);
      });
    }
  }  // joined: every byte received
  return static_cast<double>(kStreams * chunks * size) / seconds_since(start);
}

// ---------------------------------------------------------------- pstwin

// 1 server, 2 workers, one tensor of `values` x `size` split into `values` partitions, no compute,
// no staging (workers push their own buffers, as ps-lite's KV benchmark does), real payloads.
// Invariant checks and the trace are off: they read every byte on the event loops being measured.
pstwin::Scenario bench_scenario(std::uint64_t size, int values, int iterations, int credit,
                                const Overrides& sets) {
  std::ostringstream toml;
  toml << "name = \"bench_loopback\"\n"
       << "[roles]\nservers = 1\nworkers = 2\n"
       << "[ps]\nmode = \"sync\"\npartition_bytes = " << size << "\nscheduling_credit = " << credit
       << "\n[workload]\ntensor_bytes = [" << size * static_cast<std::uint64_t>(values)
       << "]\ncompute = \"0s\"\niterations = " << iterations << "\npayload = \"real\"\n"
       << "[staging]\nenabled = false\n"
       << "[invariants]\naggregates = false\nupdates = false\nsync_identical = false\n"
       << "[output]\ntrace = false\n";
  return pstwin::parse_scenario(toml.str(), "bench_loopback", sets);
}

std::vector<double> iteration_times(const pstwin::RunReport& report) {
  if (!report.completed) throw std::runtime_error("the real run failed: " + report.failure);
  std::vector<double> times;
  for (const auto& it : report.iterations) times.push_back(it.time_s);
  return times;
}

// Drops the first tenth (connections warming, allocator growing).
std::vector<double> steady(std::vector<double> times) {
  times.erase(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 10));
  return times;
}

struct Row {
  std::uint64_t size = 0;
  double ps_p50 = 0, ps_p99 = 0, tcp_p50 = 0, tcp_p99 = 0;
  double ps_Bps = 0, tcp_Bps = 0, tcp_x4_Bps = 0;
  double ps_lat_cpu = 0, ps_pipe_cpu = 0, tcp_cpu = 0;
  double ps_cpu_per_GB = 0, tcp_cpu_per_GB = 0;  // CPU seconds per 1e9 bytes moved: pipelined, one stream
};

struct Plan {
  int latency_rounds;
  int pipeline_values;
  int pipeline_iterations;
};

Plan plan_for(std::uint64_t size, bool quick) {
  const int scale = quick ? 4 : 1;
  if (size <= 64 * 1024) return {4000 / scale, 256, 200 / scale};  // 200: a phase of ~0.1 s was noise
  if (size <= 4 * 1024 * 1024) return {400 / scale, 64, 20 / scale};
  return {60 / scale, 8, 10 / scale};
}

}  // namespace

namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One round of the blocking and the pipelined job: the p50 iteration time and the throughput
// (push + pull bytes of both workers per second).
struct Sample {
  double p50 = 0;
  double Bps = 0;
};

Sample sample(std::uint64_t size, const Plan& plan, int credit, const Overrides& sets,
              const pstwin::realnet::LocalRunOptions& options) {
  const auto latency = steady(iteration_times(
      pstwin::realnet::run_local(bench_scenario(size, 1, plan.latency_rounds, credit, sets), options)));
  const auto pipeline = steady(iteration_times(pstwin::realnet::run_local(
      bench_scenario(size, plan.pipeline_values, plan.pipeline_iterations, credit, sets), options)));
  double busy = 0;
  for (const double t : pipeline) busy += t;
  return {percentile(latency, 0.5), 2.0 * 2.0 * static_cast<double>(size) * plan.pipeline_values *
                                        static_cast<double>(pipeline.size()) / busy};
}

// A setting measured on and off: what the table calls each side, and how a run turns it on.
struct Toggle {
  std::string on;   // "with token"
  std::string off;  // "without"
  std::function<void(pstwin::realnet::LocalRunOptions&, bool)> apply;
};

// Authenticated (a random token: every connection proves membership once) against unauthenticated.
Toggle job_authentication() {
  return {"with token", "without", [](pstwin::realnet::LocalRunOptions& options, bool on) {
            options.job_token = on ? std::nullopt : std::optional<std::string>("");
          }};
}

// Encrypted (ZeroMQ CURVE, PSTWIN_ENCRYPT=curve) against plain, both with a random token.
Toggle curve_encryption() {
  return {"encrypted", "plain", [](pstwin::realnet::LocalRunOptions& options, bool on) {
            options.job_token = std::nullopt;
            options.encrypt = on;
          }};
}

// The epoll van's nodes on one LoopPool (the default) against a thread each.
Toggle shared_loops() {
  return {"shared loops", "a loop thread each",
          [](pstwin::realnet::LocalRunOptions& options, bool on) { options.shared_loops = on; }};
}

// The toggle on against off, interleaved so that drift in the machine's load hits both alike.
int toggle_ab(const Toggle& toggle, const std::vector<std::uint64_t>& sizes, int credit, bool quick,
              const Overrides& sets, pstwin::realnet::LocalRunOptions options, int rounds) {
  const std::string ratio = toggle.on + " / " + toggle.off;
  std::printf("van %s; load average before: %s; %u CPUs; %s, %d interleaved rounds\n",
              std::string(pstwin::realnet::van_name(options.van)).c_str(), load_average().c_str(),
              std::thread::hardware_concurrency(), ratio.c_str(), rounds);
  std::printf(
      "| value | p50 %s | ratio | pipelined %s | ratio |\n"
      "| --- | --- | --- | --- | --- |\n",
      ratio.c_str(), ratio.c_str());
  for (const auto size : sizes) {
    const Plan plan = plan_for(size, quick);
    std::vector<double> p50[2], bps[2];
    for (int round = 0; round < rounds; ++round)
      for (int turn = 0; turn < 2; ++turn) {
        const int on = (round + turn) % 2;
        toggle.apply(options, on == 1);
        const Sample got = sample(size, plan, credit, sets, options);
        p50[on].push_back(got.p50);
        bps[on].push_back(got.Bps);
      }
    std::printf("| %s | %.1f / %.1f us | %.3f | %.3f / %.3f GB/s | %.3f |\n", size_text(size).c_str(),
                median(p50[1]) * 1e6, median(p50[0]) * 1e6, median(p50[1]) / median(p50[0]),
                median(bps[1]) / 1e9, median(bps[0]) / 1e9, median(bps[1]) / median(bps[0]));
    std::fflush(stdout);
  }
  std::printf("load average after: %s (medians over the rounds; ratio = %s)\n", load_average().c_str(),
              ratio.c_str());
  return 0;
}

// One column of a van comparison: a van, and for ucx the UCX_TLS it runs with ("" leaves it as found).
struct VanColumn {
  std::string name;  // as given: "epoll", "ucx", "ucx:tcp"
  pstwin::realnet::Van van;
  std::optional<std::string> ucx_tls;
};

// "zmq,epoll,ucx,ucx:tcp": a column per van; "ucx:TLS" runs the ucx van with UCX_TLS=TLS.
std::vector<VanColumn> parse_van_columns(const std::string& text) {
  std::vector<VanColumn> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const auto colon = item.find(':');
    const std::string van = item.substr(0, colon);
    const auto parsed = pstwin::realnet::parse_van(van);
    if (!parsed || (colon != std::string::npos && *parsed != pstwin::realnet::Van::kUcx))
      throw std::invalid_argument("--vans: '" + item + "': expected " +
                                  std::string(pstwin::realnet::kVanChoices) +
                                  ", or ucx:UCX_TLS (e.g. ucx:tcp)");
    if (const auto missing = pstwin::realnet::van_unavailable(*parsed); !missing.empty())
      throw std::invalid_argument("--vans: " + item + ": " + std::string(missing));
    out.push_back(
        {item, *parsed,
         colon == std::string::npos ? std::nullopt : std::optional<std::string>(item.substr(colon + 1))});
  }
  if (out.empty()) throw std::invalid_argument("--vans: expected at least one van");
  return out;
}

// Several vans in one run, interleaved (each round runs every van, in a rotating order) so that drift
// in the machine's load hits all alike; prints each van's median p50 latency and pipelined
// throughput, and each van's throughput over the first van's.
int van_ab(const std::vector<std::uint64_t>& sizes, int credit, bool quick, const Overrides& sets,
           pstwin::realnet::LocalRunOptions options, const std::vector<VanColumn>& vans, int rounds) {
  const char* found_tls = std::getenv("UCX_TLS");
  const std::optional<std::string> tls_before =
      found_tls ? std::optional<std::string>(found_tls) : std::nullopt;
  std::printf("vans compared, %d interleaved rounds; load average before: %s; %u CPUs; UCX_TLS %s\n", rounds,
              load_average().c_str(), std::thread::hardware_concurrency(),
              tls_before ? tls_before->c_str() : "unset");
  std::string head = "| value |";
  std::string rule = "| --- |";
  for (const auto& van : vans) {
    head += " p50 " + van.name + " |";
    rule += " --- |";
  }
  for (const auto& van : vans) {
    head += " pipelined " + van.name + " |";
    rule += " --- |";
  }
  for (std::size_t v = 1; v < vans.size(); ++v) {
    head += " " + vans[v].name + " / " + vans[0].name + " |";
    rule += " --- |";
  }
  std::printf("%s\n%s\n", head.c_str(), rule.c_str());
  for (const auto size : sizes) {
    const Plan plan = plan_for(size, quick);
    std::vector<std::vector<double>> p50(vans.size()), bps(vans.size());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t turn = 0; turn < vans.size(); ++turn) {
        const std::size_t v = (static_cast<std::size_t>(round) + turn) % vans.size();
        options.van = vans[v].van;
        const auto& tls = vans[v].ucx_tls ? vans[v].ucx_tls : tls_before;
        if (tls)
          setenv("UCX_TLS", tls->c_str(), 1);
        else
          unsetenv("UCX_TLS");
        const Sample got = sample(size, plan, credit, sets, options);
        p50[v].push_back(got.p50);
        bps[v].push_back(got.Bps);
      }
    std::string line = "| " + size_text(size) + " |";
    char cell[64];
    for (std::size_t v = 0; v < vans.size(); ++v) {
      std::snprintf(cell, sizeof cell, " %.1f us |", median(p50[v]) * 1e6);
      line += cell;
    }
    for (std::size_t v = 0; v < vans.size(); ++v) {
      std::snprintf(cell, sizeof cell, " %.3f GB/s |", median(bps[v]) / 1e9);
      line += cell;
    }
    for (std::size_t v = 1; v < vans.size(); ++v) {
      std::snprintf(cell, sizeof cell, " %.2f |", median(bps[v]) / median(bps[0]));
      line += cell;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  std::printf("load average after: %s (medians over the rounds)\n", load_average().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::uint64_t> sizes{4096, 1 << 20, 16 << 20};
  int auth_rounds = 0;
  int encrypt_rounds = 0;
  int pool_rounds = 0;
  std::vector<VanColumn> van_columns;
  int van_rounds = 3;
  int credit = 4;
  bool quick = false;
  std::string only;  // "", "latency", "pipelined" or "tcp": one part alone (for profiling)
  pstwin::realnet::LocalRunOptions run_options;
  Overrides sets;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      const bool has_value = i + 1 < argc;
      if (arg == "--quick") {
        quick = true;
      } else if (arg == "--auth-ab" && has_value) {
        auth_rounds = std::stoi(argv[++i]);
        if (auth_rounds < 1) throw std::invalid_argument("--auth-ab: expected a number of rounds >= 1");
      } else if (arg == "--loop-threads" && has_value) {
        run_options.loop_threads = std::stoi(argv[++i]);
      } else if (arg == "--shared-loops-ab" && has_value) {
        pool_rounds = std::stoi(argv[++i]);
        if (pool_rounds < 1)
          throw std::invalid_argument("--shared-loops-ab: expected a number of rounds >= 1");
      } else if (arg == "--encrypt-ab" && has_value) {
        encrypt_rounds = std::stoi(argv[++i]);
        if (encrypt_rounds < 1) throw std::invalid_argument("--encrypt-ab: expected a number of rounds >= 1");
      } else if (arg == "--only" && has_value) {
        only = argv[++i];
        if (only != "latency" && only != "pipelined" && only != "tcp")
          throw std::invalid_argument("--only " + only + ": expected latency, pipelined or tcp");
      } else if (arg == "--van" && has_value) {
        const std::string van = argv[++i];
        const auto parsed = pstwin::realnet::parse_van(van);
        if (!parsed)
          throw std::invalid_argument("--van " + van + ": expected " +
                                      std::string(pstwin::realnet::kVanChoices));
        run_options.van = *parsed;
      } else if (arg == "--vans" && has_value) {
        van_columns = parse_van_columns(argv[++i]);
      } else if (arg == "--rounds" && has_value) {
        van_rounds = std::stoi(argv[++i]);
        if (van_rounds < 1) throw std::invalid_argument("--rounds: expected a number of rounds >= 1");
      } else if (arg == "--credit" && has_value) {
        credit = std::stoi(argv[++i]);
      } else if (arg == "--sizes" && has_value) {
        sizes.clear();
        std::stringstream list(argv[++i]);
        for (std::string item; std::getline(list, item, ',');) {
          const auto parsed = pstwin::units::parse_size(item);
          if (parsed.status != pstwin::units::ParseStatus::kOk || parsed.value == 0 || parsed.value % 4 != 0)
            throw std::invalid_argument("--sizes: '" + item +
                                        "' is not a size > 0 and a multiple of 4 B (e.g. 4KB)");
          sizes.push_back(parsed.value);
        }
      } else if (arg == "--set" && has_value) {
        const std::string set = argv[++i];
        const auto eq = set.find('=');
        if (eq == std::string::npos) throw std::invalid_argument("--set " + set + ": expected FIELD=VALUE");
        sets.emplace_back(set.substr(0, eq), set.substr(eq + 1));
      } else {
        throw std::invalid_argument(
            "unknown argument '" + arg +
            "'; usage: bench_loopback [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--credit N] [--quick] "
            "[--only latency|pipelined|tcp] [--set FIELD=VALUE]... [--auth-ab N] [--encrypt-ab N] "
            "[--shared-loops-ab N] [--loop-threads N] "
            "[--vans zmq,epoll,ucx,ucx:TLS [--rounds N]]");
      }
    }
    if ((auth_rounds > 0) + (encrypt_rounds > 0) + (pool_rounds > 0) > 1)
      throw std::invalid_argument("--auth-ab, --encrypt-ab and --shared-loops-ab: one at a time");
    if (const auto why = pstwin::realnet::encryption_unavailable(run_options.van);
        encrypt_rounds > 0 && !why.empty())
      throw std::invalid_argument("--encrypt-ab with --van " +
                                  std::string(pstwin::realnet::van_name(run_options.van)) + ": " + why);
  } catch (const std::exception& e) {
    std::cerr << "bench_loopback: " << e.what() << "\n";
    return 2;
  }

  if (!van_columns.empty()) {
    try {
      return van_ab(sizes, credit, quick, sets, run_options, van_columns, van_rounds);
    } catch (const std::exception& e) {
      std::cerr << "bench_loopback: " << e.what() << "\n";
      return 1;
    }
  }
  if (auth_rounds > 0 || encrypt_rounds > 0 || pool_rounds > 0) {
    try {
      if (pool_rounds > 0)
        return toggle_ab(shared_loops(), sizes, credit, quick, sets, run_options, pool_rounds);
      return auth_rounds > 0
                 ? toggle_ab(job_authentication(), sizes, credit, quick, sets, run_options, auth_rounds)
                 : toggle_ab(curve_encryption(), sizes, credit, quick, sets, run_options, encrypt_rounds);
    } catch (const std::exception& e) {
      std::cerr << "bench_loopback: " << e.what() << "\n";
      return 1;
    }
  }
  try {
    std::printf("van %s; load average before: %s; %u CPUs; ps.scheduling_credit %d\n",
                std::string(pstwin::realnet::van_name(run_options.van)).c_str(), load_average().c_str(),
                std::thread::hardware_concurrency(), credit);
    std::vector<Row> rows;
    for (const auto size : sizes) {
      const Plan plan = plan_for(size, quick);
      Row row;
      row.size = size;

      double cpu = cpu_seconds();
      if (only.empty() || only == "latency") {
        const auto latency = steady(iteration_times(pstwin::realnet::run_local(
            bench_scenario(size, 1, plan.latency_rounds, credit, sets), run_options)));
        row.ps_lat_cpu = cpu_seconds() - cpu;
        row.ps_p50 = percentile(latency, 0.5);
        row.ps_p99 = percentile(latency, 0.99);
      }
      if (only.empty() || only == "pipelined") {
        cpu = cpu_seconds();
        const auto pipeline = steady(iteration_times(pstwin::realnet::run_local(
            bench_scenario(size, plan.pipeline_values, plan.pipeline_iterations, credit, sets),
            run_options)));
        row.ps_pipe_cpu = cpu_seconds() - cpu;
        row.ps_cpu_per_GB = row.ps_pipe_cpu / (4.0 * static_cast<double>(size) * plan.pipeline_values *
                                               plan.pipeline_iterations / 1e9);
        double busy = 0;
        for (const double t : pipeline) busy += t;
        // Both workers push and pull every value once per iteration.
        const double moved = 2.0 * 2.0 * static_cast<double>(size) * plan.pipeline_values *
                             static_cast<double>(pipeline.size());
        row.ps_Bps = moved / busy;
      }
      if (only.empty() || only == "tcp") {
        cpu = cpu_seconds();
        const auto tcp = steady(tcp_ping_pong(size, plan.latency_rounds));
        row.tcp_p50 = percentile(tcp, 0.5);
        row.tcp_p99 = percentile(tcp, 0.99);
        const std::uint64_t total = std::max<std::uint64_t>(size * 64, quick ? 1ull << 30 : 4ull << 30);
        const double stream_cpu = cpu_seconds();
        row.tcp_Bps = tcp_stream(size, total);
        row.tcp_cpu_per_GB = (cpu_seconds() - stream_cpu) / (static_cast<double>(total / size * size) / 1e9);
        row.tcp_x4_Bps = tcp_streams_x4(size, total);
        row.tcp_cpu = cpu_seconds() - cpu;
      }
      rows.push_back(row);
      std::printf(
          "%-5s pstwin blocking p50 %8.1f us p99 %8.1f us | raw TCP ping-pong p50 %8.1f us p99 %8.1f us | "
          "pstwin pipelined %6.3f GB/s | raw TCP stream %6.3f GB/s, 4 streams %6.3f GB/s | CPU s: latency "
          "%.2f, "
          "pipelined %.2f, TCP %.2f | CPU s per GB: pipelined %.3f, raw stream %.3f\n",
          size_text(size).c_str(), row.ps_p50 * 1e6, row.ps_p99 * 1e6, row.tcp_p50 * 1e6, row.tcp_p99 * 1e6,
          row.ps_Bps / 1e9, row.tcp_Bps / 1e9, row.tcp_x4_Bps / 1e9, row.ps_lat_cpu, row.ps_pipe_cpu,
          row.tcp_cpu, row.ps_cpu_per_GB, row.tcp_cpu_per_GB);
      std::fflush(stdout);
    }
    std::printf(
        "\n| value | pstwin p50 / p99 | raw TCP p50 / p99 | p50 ratio | pstwin pipelined | raw TCP stream | "
        "ratio | raw TCP, 4 streams | ratio to 4 streams | CPU s/GB pipelined / raw stream |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (const auto& r : rows)
      std::printf(
          "| %s | %.1f / %.1f us | %.1f / %.1f us | %.2f x | %.3f GB/s | %.3f GB/s | %.2f | %.3f GB/s | %.2f "
          "| "
          "%.3f / %.3f |\n",
          size_text(r.size).c_str(), r.ps_p50 * 1e6, r.ps_p99 * 1e6, r.tcp_p50 * 1e6, r.tcp_p99 * 1e6,
          r.ps_p50 / r.tcp_p50, r.ps_Bps / 1e9, r.tcp_Bps / 1e9, r.ps_Bps / r.tcp_Bps, r.tcp_x4_Bps / 1e9,
          r.ps_Bps / r.tcp_x4_Bps, r.ps_cpu_per_GB, r.tcp_cpu_per_GB);
    std::printf(
        "load average after: %s (GB = 1e9 bytes; pipelined counts push + pull bytes of both workers, each "
        "byte "
        "crossing loopback once, as the raw stream's; ratio = pipelined / one raw stream, as "
        "docs/PERFORMANCE.md defines it)\n",
        load_average().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_loopback: " << e.what() << "\n";
    return 1;
  }
}
