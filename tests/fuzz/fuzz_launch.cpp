// libFuzzer target: what `pstwin launch` and `pstwin node` parse from outside the program. The first
// input byte picks the parser, the rest is its input:
//   0  a hostfile (parse_hostfile; host names resolve through a fixed table, never the network);
//   1  the launch message on a node's stdin (read_launch_message);
//   2  an environment, one NAME=VALUE a line (check_env_names, then parse_node_env: DMLC_*, BYTEPS_*,
//      PS_*, PSTWIN_* and the launchers' OMPI_*/SLURM_* ranks), as `pstwin node` reads it;
//   3  the same as a ps-lite application's node reads it (a worker's rank may come from the scheduler);
//   4  `--shard TEXT` on its first line, then the environment for `--shard launcher`.
// Bad input must be the parser's own error (exit status 2) naming what is wrong, never a crash, a
// hang or an allocation the input's numbers ask for; what parses must hold what the parser promises.
#include <arpa/inet.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "cli/shards.hpp"
#include "realnet/launch_inputs.hpp"
#include "realnet/node_env.hpp"

namespace {

namespace realnet = pstwin::realnet;

void require(bool condition) {
  if (!condition) std::abort();
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

bool is_ipv4(const std::string& text) {
  in_addr parsed{};
  return ::inet_pton(AF_INET, text.c_str(), &parsed) == 1;
}

// Lines "NAME=VALUE"; a line without '=' is skipped, as the process environment has none.
std::map<std::string, std::string> environment_of(std::string_view text) {
  std::map<std::string, std::string> env;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    const auto eq = line.find('=');
    if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return env;
}

// Stands in for the system resolver: names with a digit resolve (to a loopback address when they
// start with "local"), others do not, as an unknown name would not.
std::string resolve(const std::string& host, const std::string& where) {
  if (is_ipv4(host)) return host;
  if (std::ranges::none_of(host, [](char c) { return c >= '0' && c <= '9'; }))
    throw realnet::LaunchError(where + ": cannot resolve \"" + host + "\"");
  return host.starts_with("local") ? "127.0.0.2" : "10.0.0." + std::to_string(host.size() % 250);
}

void hostfile(std::string_view text) {
  std::vector<realnet::LaunchHost> hosts;
  try {
    hosts = realnet::parse_hostfile(text, "hosts.txt", resolve);
  } catch (const realnet::LaunchError& e) {
    require(std::string_view(e.what()).starts_with("hosts.txt"));
    return;
  }
  require(!hosts.empty());
  std::set<std::string> names;
  for (const auto& host : hosts) {
    require(!host.name.empty() && !contains(host.name, "=") && names.insert(host.name).second);
    require(host.slots >= 0 && host.slots <= 65536 && host.line >= 1);
    require(is_ipv4(host.address));
    require(hosts.size() == 1 || !host.address.starts_with("127."));
  }
}

void launch_message(std::string_view text) {
  std::istringstream in{std::string(text)};
  realnet::LaunchMessage message;
  try {
    message = realnet::read_launch_message(in);
  } catch (const realnet::LaunchError& e) {
    require(std::string_view(e.what()).starts_with("--launched: "));
    return;
  }
  // What the launcher would write for it reads back the same.
  std::istringstream again{realnet::launch_message_text(message)};
  const auto twice = realnet::read_launch_message(again);
  require(twice.env == message.env && twice.scenario == message.scenario);
}

// The outcome of reading `env` as `pstwin node` does: the warnings and the parsed environment, or
// the error's text.
std::string node_outcome(const std::map<std::string, std::string>& env, bool worker_id_required) {
  std::string outcome;
  try {
    for (const auto& warning : realnet::check_env_names(env)) outcome += "warning: " + warning + "\n";
    const auto parsed = realnet::parse_node_env(realnet::node_variables(env), {worker_id_required});
    require(parsed.root_port >= 1 && parsed.root_port <= 65535);
    require(parsed.num_workers >= 1 && parsed.num_servers >= 1);
    require(parsed.num_validators >= 0 && parsed.num_validators <= parsed.num_workers);
    if (parsed.role == pstwin::Role::kWorker)
      require(parsed.worker_id < parsed.num_workers && (parsed.worker_id >= 0 || !worker_id_required));
    if (parsed.role == pstwin::Role::kValidator)
      require(parsed.validator_id >= 0 && parsed.validator_id < parsed.num_validators);
    require(!contains(parsed.root_uri, ":") && !contains(parsed.node_host, ":"));
    // Encryption's keys come from the token, and only the ZeroMQ van has CURVE.
    if (parsed.encrypt) require(!parsed.job_token.empty() && parsed.van == realnet::Van::kZmq);
    outcome += "ok " + parsed.scheduler_address() + " " + parsed.bind_address();
    for (const auto& [field, value] : parsed.scenario_overrides()) outcome += " " + field + "=" + value;
  } catch (const realnet::NodeEnvError& e) {
    const std::string_view what = e.what();
    require(!what.empty());
    outcome += "error: " + std::string(what);
  }
  return outcome;
}

void node_environment(std::string_view text, bool worker_id_required) {
  auto env = environment_of(text);
  const std::string outcome = node_outcome(env, worker_id_required);
  // The job token is a secret: no message may depend on its text, only on its length.
  if (const auto token = env.find("PSTWIN_JOB_TOKEN"); token != env.end()) {
    std::string other = token->second;
    for (auto& c : other) c = c == 'k' ? 'q' : 'k';
    token->second = other;
    require(node_outcome(env, worker_id_required) == outcome);
  }
}

void shard(std::string_view text) {
  const auto eol = text.find('\n');
  const std::string option(text.substr(0, eol));
  const auto env = environment_of(eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1));
  try {
    const auto parsed = pstwin::cli::parse_shard(option, env);
    require(parsed.count >= 1 && parsed.count <= 65536 && parsed.index < parsed.count);
    require(parsed.holds(parsed.index) && parsed.holds(parsed.index + parsed.count));
  } catch (const pstwin::ScenarioError& e) {
    require(std::string_view(e.what()).starts_with("--shard "));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0:
      hostfile(text);
      break;
    case 1:
      launch_message(text);
      break;
    case 2:
      node_environment(text, true);
      break;
    case 3:
      node_environment(text, false);  // a ps-lite application's workers (rank from the scheduler)
      break;
    default:
      shard(text);
      break;
  }
  return 0;
}
