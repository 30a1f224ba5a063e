#include "realnet/job_launch.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "realnet/job_auth.hpp"
#include "realnet/job_children.hpp"
#include "realnet/job_parts.hpp"
#include "realnet/shm_staging.hpp"

namespace pstwin::realnet {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kReportHeader = "pstwin-report ";

// What a remote shell passes on unquoted: ssh joins the words of the node's command with blanks and
// hands them to the remote user's shell, `ip netns exec` runs them as they are; only these characters
// mean the same to both.
bool shell_safe(std::string_view word) {
  return !word.empty() && std::ranges::all_of(word, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("/._+-:@%,=").find(c) != std::string_view::npos;
  });
}

// A pipe's write end held by the launcher: the node's stdin stays open while this does.
class StdinPipe {
 public:
  StdinPipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    read_ = fds[0];
    write_ = fds[1];
  }
  ~StdinPipe() {
    close_read();
    close_write();
  }
  StdinPipe(const StdinPipe&) = delete;
  StdinPipe& operator=(const StdinPipe&) = delete;
  int read_end() const { return read_; }
  void close_read() {
    if (read_ >= 0) ::close(read_);
    read_ = -1;
  }
  void close_write() {
    if (write_ >= 0) ::close(write_);
    write_ = -1;
  }
  // Writes all of `text`; false if the reader is gone (SIGPIPE is ignored while launching).
  bool write_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::write(write_, text.data(), text.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

 private:
  int read_ = -1;
  int write_ = -1;
};

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<LaunchNode> place_nodes(const Scenario& sc, const std::vector<LaunchHost>& hosts) {
  std::vector<LaunchNode> nodes{{"scheduler", Role::kScheduler, 0, 0}};
  std::vector<int> used(hosts.size(), 0);
  std::size_t next = 0;
  std::size_t capacity = 0;
  bool unlimited = false;
  for (const auto& host : hosts) {
    unlimited = unlimited || host.slots == 0;
    capacity += static_cast<std::size_t>(host.slots);
  }
  const std::size_t wanted =
      static_cast<std::size_t>(sc.roles.servers) + sc.roles.workers + sc.roles.validators;
  if (!unlimited && capacity < wanted)
    throw LaunchError("the hostfile has " + std::to_string(capacity) + " slots, the scenario needs " +
                      std::to_string(wanted) + " (" + std::to_string(sc.roles.servers) + " servers, " +
                      std::to_string(sc.roles.workers) + " workers, " + std::to_string(sc.roles.validators) +
                      " validators; the scheduler takes none): add hosts or raise slots=N");
  auto deal = [&](Role role, int count, const std::string& prefix) {
    for (int rank = 0; rank < count; ++rank) {
      while (hosts[next].slots != 0 && used[next] >= hosts[next].slots) next = (next + 1) % hosts.size();
      ++used[next];
      nodes.push_back({prefix + std::to_string(rank), role, rank, next});
      next = (next + 1) % hosts.size();
    }
  };
  deal(Role::kServer, sc.roles.servers, "server");
  deal(Role::kWorker, sc.roles.workers, "worker");
  deal(Role::kValidator, sc.roles.validators, "validator");
  return nodes;
}

std::string framed_report(const NodePart& part) {
  const std::string json = part_to_json(part).dump() + "\n";
  return "\n" + std::string(kReportHeader) + std::to_string(json.size()) + "\n" + json;
}

std::optional<NodePart> report_from_output(std::string_view output) {
  std::string header = "\n" + std::string(kReportHeader);
  auto at = output.rfind(header);
  if (at == std::string_view::npos && output.starts_with(kReportHeader)) at = 0, header = kReportHeader;
  if (at == std::string_view::npos) return std::nullopt;
  const auto from = at + header.size();
  const auto eol = output.find('\n', from);
  if (eol == std::string_view::npos) return std::nullopt;
  std::size_t bytes = 0;
  const auto [end, ec] = std::from_chars(output.data() + from, output.data() + eol, bytes);
  if (ec != std::errc{} || end != output.data() + eol || bytes > output.size() - eol - 1) return std::nullopt;
  try {
    return part_from_json(nlohmann::json::parse(output.substr(eol + 1, bytes)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> remote_command(const JobLaunchOptions& options, const LaunchHost& host) {
  auto words = words_of(options.rsh);
  if (words.empty())
    throw LaunchError("--rsh \"" + options.rsh +
                      "\": empty; give the command that runs a command on a host, "
                      "e.g. --rsh 'ssh -o BatchMode=yes {host}'");
  bool placed = false;
  for (auto& word : words)
    for (auto at = word.find("{host}"); at != std::string::npos;
         at = word.find("{host}", at + host.name.size())) {
      word.replace(at, 6, host.name);
      placed = true;
    }
  if (!placed) words.push_back(host.name);
  std::string binary = options.remote_binary;
  if (binary.empty()) binary = std::filesystem::read_symlink("/proc/self/exe").string();
  if (!shell_safe(binary))
    throw LaunchError(
        "--remote-pstwin " + binary +
        ": the remote shell would interpret some of its characters; install pstwin at a path of "
        "letters, digits and /._+-:@%,= only");
  words.insert(words.end(), {binary, "node", "--launched"});
  return words;
}

RunReport launch_job(const Scenario& sc, const JobLaunchOptions& options) {
  const auto wall_start = Clock::now();
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  const auto& hosts = options.hosts;
  const auto nodes = place_nodes(sc, hosts);
  const std::filesystem::path dir(options.parts_dir);
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json" || entry.path().extension() == ".log" ||
        entry.path().extension() == ".out")
      std::filesystem::remove(entry.path());
  std::vector<std::vector<std::string>> commands;
  for (const auto& node : nodes) commands.push_back(remote_command(options, hosts[node.host]));

  // The remote shells' environment: this process's, without the job's variables (which go on stdin).
  const std::vector<std::string> local_env = environment_without_job_variables();
  const int port = options.port > 0 ? options.port : free_local_port();
  // Nodes on this machine unlink their staging objects as they exit; one killed cannot.
  struct StagingSweep {
    std::string prefix;
    ~StagingSweep() { ShmStaging::unlink_all(prefix); }
  } const staging_sweep{job_staging_prefix(port)};
  std::map<std::string, std::string> job_env{
      {"DMLC_PS_ROOT_URI", hosts.front().address},
      {"DMLC_PS_ROOT_PORT", std::to_string(port)},
      {"DMLC_NUM_WORKER", std::to_string(sc.roles.workers)},
      {"DMLC_NUM_SERVER", std::to_string(sc.roles.servers)},
      {"DMLC_PS_VAN_TYPE", std::string(van_name(options.van))},
      {"PS_VERBOSE", "0"},
      {"BYTEPS_FORCE_DISTRIBUTED", "1"},
      // A fresh secret per job, on stdin only: its nodes prove it on every connection.
      {"PSTWIN_JOB_TOKEN", JobKey::random_token()}};
  if (sc.roles.validators > 0) job_env["DMLC_NUM_VALIDATOR"] = std::to_string(sc.roles.validators);
  if (options.encrypt) job_env["PSTWIN_ENCRYPT"] = "curve";
  const std::string scenario_text = resolved_toml(sc);
  log("scheduler on " + hosts.front().name + " (" + hosts.front().address + ":" + std::to_string(port) +
      "), node reports and logs in " + options.parts_dir);

  const LauncherSignals signals;
  // Destroyed in reverse: every remote shell is killed and reaped before its stdin closes.
  std::vector<std::unique_ptr<StdinPipe>> stdins;
  std::vector<std::unique_ptr<JobChild>> children;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    const auto& host = hosts[node.host];
    LaunchMessage message{job_env, scenario_text};
    auto& env = message.env;
    env["DMLC_ROLE"] = node.role == Role::kScheduler ? "scheduler"
                       : node.role == Role::kServer  ? "server"
                                                     : "worker";
    env["DMLC_NODE_HOST"] = host.address;
    // Staging memory is shared by the nodes of one host; the name is bounded (node_env.cpp).
    env["PSTWIN_HOST"] = host.name.size() <= 64 ? host.name : "host" + std::to_string(node.host);
    if (node.role == Role::kWorker) env["DMLC_WORKER_ID"] = std::to_string(node.rank);
    if (node.role == Role::kValidator) {
      env["DMLC_WORKER_TYPE"] = "validator";
      env["DMLC_VALIDATOR_ID"] = std::to_string(node.rank);
    }
    stdins.push_back(std::make_unique<StdinPipe>());
    children.push_back(
        std::make_unique<JobChild>(JobChild::Spec{.name = node.name,
                                                  .argv = commands[i],
                                                  .env = local_env,
                                                  .stdout_path = (dir / (node.name + ".out")).string(),
                                                  .stderr_path = (dir / (node.name + ".log")).string(),
                                                  .netns_fd = -1,
                                                  .stdin_fd = stdins.back()->read_end()}));
    stdins.back()->close_read();
    // A remote shell that is already gone shows in the loop below.
    stdins.back()->write_all(launch_message_text(message));
    log("started " + node.name + " on " + host.name + " (pid " + std::to_string(children.back()->pid()) +
        ")");
  }

  auto exit_on_signal = [&] {
    const int sig = signals.caught();
    for (auto& child : children) child->kill();  // each remote node sees its stdin end and stops
    ShmStaging::unlink_all(staging_sweep.prefix);
    log(std::string("interrupted by signal ") + std::to_string(sig) + ": killed every remote shell");
    std::exit(128 + sig);
  };
  auto part_of = [&](const JobChild& child) {
    return report_from_output(read_text_file(dir / (child.name() + ".out")));
  };
  ChildWatch watch;
  watch.report = [&](std::size_t i) { return part_of(*children[i]); };
  watch.label = [&](std::size_t i) { return nodes[i].name + " on " + hosts[nodes[i].host].name; };
  watch.log_path = [&](std::size_t i) { return (dir / (nodes[i].name + ".log")).string(); };
  // Closing a node's stdin asks it to stop; over ssh it still reports through the connection, which
  // a SIGTERM to ssh would cut.
  watch.ask_to_stop = [&](std::size_t i) { stdins[i]->close_write(); };
  watch.log = log;
  watch.on_signal = exit_on_signal;
  std::string failure = watch_children(children, signals, wall_start, sc.run.time_limit_s, watch);
  if (signals.caught() != 0) exit_on_signal();

  std::vector<NodePart> parts;
  for (const auto& child : children) {
    auto part = part_of(*child);
    if (!part) {
      if (failure.empty())
        failure = child->name() + " sent no report (see " + (dir / (child->name() + ".log")).string() + ")";
      continue;
    }
    // As `pstwin node --report` would have written it: `pstwin merge` reads the directory again.
    std::ofstream(dir / (child->name() + ".json")) << part_to_json(*part).dump(2) << "\n";
    parts.push_back(std::move(*part));
  }
  children.clear();
  RunReport report = merge_parts(sc, parts, failure);
  report.van = std::string(van_name(options.van));
  report.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
  report.run_time_s = report.wall_s;
  return report;
}

}  // namespace pstwin::realnet
