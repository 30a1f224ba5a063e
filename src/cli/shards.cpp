#include "cli/shards.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenario/scenario.hpp"

namespace pstwin::cli {
namespace {

constexpr std::uint64_t kMaxShards = 65536;
// A million seeds' explore.json is a few hundred MB.
constexpr std::uintmax_t kMaxShardFileBytes = std::uintmax_t{4} << 30;

std::optional<std::uint64_t> number(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

struct ShardFile {
  std::filesystem::path path;
  Shard shard;
};

// The files `stem`-shard-I-of-N.`extension` in `dir`, ordered by I.
std::vector<ShardFile> shard_files(const std::filesystem::path& dir, const std::string& stem,
                                   const std::string& extension) {
  const std::regex pattern(stem + R"(-shard-(\d+)-of-(\d+)\.)" + extension);
  std::vector<ShardFile> files;
  std::smatch match;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, pattern)) continue;
    const auto index = number(match[1].str());
    const auto count = number(match[2].str());
    if (!index || !count || *count == 0 || *count > kMaxShards || *index >= *count)
      throw ScenarioError(entry.path().string() + ": not a shard's name (" + stem +
                          "-shard-I-of-N with 0 <= I < N); rename or remove it");
    files.push_back({entry.path(), {*index, *count}});
  }
  std::ranges::sort(files, [](const ShardFile& a, const ShardFile& b) {
    return std::tuple(a.shard.count, a.shard.index) < std::tuple(b.shard.count, b.shard.index);
  });
  return files;
}

// Every shard 0..N-1 exactly once, of one N.
void check_complete(const std::vector<ShardFile>& files, const std::filesystem::path& dir,
                    const std::string& stem, const std::string& extension) {
  const std::uint64_t count = files.front().shard.count;
  for (const auto& f : files)
    if (f.shard.count != count)
      throw ScenarioError(f.path.string() + " is one of " + std::to_string(f.shard.count) + " shards, " +
                          files.front().path.string() + " one of " + std::to_string(count) +
                          ": merge the shards of one run at a time");
  std::string missing;
  for (std::uint64_t i = 0, at = 0; i < count; ++i) {
    if (at < files.size() && files[at].shard.index == i) {
      ++at;
      continue;
    }
    missing += (missing.empty() ? "" : ", ") + Shard{i, count}.file_name(stem, extension);
  }
  if (!missing.empty())
    throw ScenarioError(dir.string() + ": no " + missing + "; run --shard I/" + std::to_string(count) +
                        " for each missing I (or copy its file here) and merge again");
}

nlohmann::ordered_json read_json_file(const std::filesystem::path& path) {
  std::error_code error;
  if (std::filesystem::file_size(path, error) > kMaxShardFileBytes)
    throw ScenarioError(path.string() + ": over 4 GiB, too big for a shard's file");
  std::ifstream in(path);
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const std::exception& e) {
    throw ScenarioError(path.string() + ": not a shard's JSON (" + e.what() + "); run that shard again");
  }
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw ScenarioError("cannot write " + path.string() + "; choose a writable --out");
}

// How many of `total` runs shard I of N holds: k = I, I + N, ... < total.
std::uint64_t runs_of(const Shard& shard, std::uint64_t total) {
  return total > shard.index ? (total - shard.index + shard.count - 1) / shard.count : 0;
}

}  // namespace

std::string Shard::file_name(std::string_view stem, std::string_view extension) const {
  return std::string(stem) + "-shard-" + std::to_string(index) + "-of-" + std::to_string(count) + "." +
         std::string(extension);
}

Shard parse_shard(const std::string& text, const std::map<std::string, std::string>& environment) {
  std::string index_text, count_text, from = "--shard " + text;
  if (text == "launcher") {
    for (const auto& [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                     std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
      const auto r = environment.find(rank), s = environment.find(size);
      if (r == environment.end() || s == environment.end()) continue;
      index_text = r->second;
      count_text = s->second;
      from =
          "--shard launcher (" + std::string(rank) + "=" + index_text + ", " + size + "=" + count_text + ")";
      break;
    }
    if (count_text.empty())
      throw ScenarioError(
          "--shard launcher: neither OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (mpirun) nor SLURM_PROCID "
          "and "
          "SLURM_NTASKS (srun) are set; start it with mpirun or srun, or give --shard I/N");
  } else {
    const auto slash = text.find('/');
    if (slash == std::string::npos)
      throw ScenarioError("--shard " + text +
                          ": expected I/N (shard I of N, 0 <= I < N), e.g. --shard 0/4, or launcher");
    index_text = text.substr(0, slash);
    count_text = text.substr(slash + 1);
  }
  const auto index = number(index_text), count = number(count_text);
  if (!index || !count || *count == 0 || *count > kMaxShards || *index >= *count)
    throw ScenarioError(from + ": expected shard I of N with 0 <= I < N <= " + std::to_string(kMaxShards) +
                        ", e.g. --shard 0/4");
  return {*index, *count};
}

std::optional<ShardKind> shard_kind(const std::filesystem::path& dir) {
  if (!shard_files(dir, "explore", "json").empty()) return ShardKind::kExplore;
  if (!shard_files(dir, "sweep", "json").empty()) return ShardKind::kSweep;
  return std::nullopt;
}

void merge_explore_shards(const std::filesystem::path& dir, const std::filesystem::path& out_dir) {
  const auto files = shard_files(dir, "explore", "json");
  check_complete(files, dir, "explore", "json");
  std::vector<nlohmann::ordered_json> docs;
  for (const auto& f : files) docs.push_back(read_json_file(f.path));
  const auto& first = docs.front();
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto& doc = docs[i];
    if (!doc.is_object() || !doc.contains("shard") || !doc.contains("runs") || !doc["runs"].is_array())
      throw ScenarioError(files[i].path.string() +
                          ": not an explore shard (no shard and runs); run that shard again");
    for (const char* field : {"scenario", "swarm", "first_seed", "seeds"})
      if (doc.value(field, nlohmann::ordered_json()) != first.value(field, nlohmann::ordered_json()))
        throw ScenarioError(files[i].path.string() + ": " + field + " " +
                            doc.value(field, nlohmann::ordered_json()).dump() + ", but " +
                            files.front().path.string() + " has " +
                            first.value(field, nlohmann::ordered_json()).dump() +
                            ": shards of different explores; merge one explore's shards at a time");
    if (doc["shard"].value("index", std::uint64_t{0}) != files[i].shard.index ||
        doc["shard"].value("count", std::uint64_t{0}) != files[i].shard.count)
      throw ScenarioError(files[i].path.string() + ": its shard field " + doc["shard"].dump() +
                          " disagrees with its name; rename it back or run that shard again");
  }
  const auto seeds = first.value("seeds", std::uint64_t{0});
  const auto first_seed = first.value("first_seed", std::uint64_t{0});
  // Run k (seed first_seed + k) is shard k mod N's (k / N)-th.
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto& runs = docs[i]["runs"];
    if (runs.size() != runs_of(files[i].shard, seeds))
      throw ScenarioError(files[i].path.string() + ": " + std::to_string(runs.size()) + " runs, expected " +
                          std::to_string(runs_of(files[i].shard, seeds)) + " of " + std::to_string(seeds) +
                          " seeds; run that shard again");
  }
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  const auto count = files.front().shard.count;
  for (std::uint64_t k = 0; k < seeds; ++k) {
    const auto& run = docs[k % count]["runs"][k / count];
    if (run.value("seed", std::uint64_t{0}) != first_seed + k)
      throw ScenarioError(files[k % count].path.string() + ": seed " +
                          run.value("seed", nlohmann::ordered_json()).dump() + " where seed " +
                          std::to_string(first_seed + k) + " belongs; run that shard again");
    runs.push_back(run);
  }
  std::filesystem::create_directories(out_dir);
  if (!first.value("swarm", false)) {
    write_text(out_dir / "explore.json", runs.dump(2) + "\n");
    return;
  }
  // As run_explore writes a swarm's explore.json; the shards ran side by side: the slowest one's wall
  // time is the explore's, their jobs add up.
  std::map<std::string, std::uint64_t> classes;
  for (const auto& run : runs) ++classes[run.value("class", std::string())];
  int jobs = 0;
  double wall_s = 0;
  for (const auto& doc : docs) {
    jobs += doc.value("jobs", 0);
    wall_s = std::max(wall_s, doc.value("wall_s", 0.0));
  }
  const auto n = static_cast<double>(std::max<std::uint64_t>(seeds, 1));
  auto tally = [&](const std::string& name) {
    return nlohmann::ordered_json{{"count", classes[name]}, {"rate", static_cast<double>(classes[name]) / n}};
  };
  const nlohmann::ordered_json doc = {{"scenario", first["scenario"]},
                                      {"swarm", true},
                                      {"seeds", seeds},
                                      {"first_seed", first_seed},
                                      {"jobs", jobs},
                                      {"wall_s", wall_s},
                                      {"seeds_per_s", wall_s > 0 ? static_cast<double>(seeds) / wall_s : 0},
                                      {"safety", tally("safety")},
                                      {"performance", tally("performance")},
                                      {"clean", tally("clean")},
                                      {"runs", std::move(runs)}};
  write_text(out_dir / "explore.json", doc.dump(2) + "\n");
}

void merge_sweep_shards(const std::filesystem::path& dir, const std::filesystem::path& out_dir) {
  const auto files = shard_files(dir, "sweep", "json");
  check_complete(files, dir, "sweep", "json");
  const auto count = files.front().shard.count;
  nlohmann::ordered_json merged_json;
  std::uint64_t total = 0;
  std::string header;
  std::vector<std::vector<std::string>> rows(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto doc = read_json_file(files[i].path);
    if (!doc.is_object() || !doc.contains("shard"))
      throw ScenarioError(files[i].path.string() +
                          ": not a sweep shard (no shard field); run that shard again");
    const auto runs = doc["shard"].value("runs", std::uint64_t{0});
    doc.erase("shard");
    if (i == 0) {
      merged_json = doc;
      total = runs;
    } else if (doc != merged_json || runs != total) {
      throw ScenarioError(
          files[i].path.string() + " and " + files.front().path.string() +
          " describe different sweeps (grid, seeds or scenario); merge one sweep's shards at a time");
    }
    const auto csv = files[i].path.parent_path() / files[i].shard.file_name("sweep", "csv");
    std::ifstream in(csv);
    if (!in)
      throw ScenarioError(csv.string() + ": missing beside " + files[i].path.string() +
                          "; copy it here or run that shard again");
    std::string line;
    std::getline(in, line);
    if (i == 0) header = line;
    if (line != header)
      throw ScenarioError(csv.string() + ": its header differs from " + files.front().path.string() +
                          "'s CSV; merge one sweep's shards at a time");
    while (std::getline(in, line)) rows[i].push_back(line);
    if (rows[i].size() != runs_of(files[i].shard, total))
      throw ScenarioError(csv.string() + ": " + std::to_string(rows[i].size()) + " rows, expected " +
                          std::to_string(runs_of(files[i].shard, total)) + " of " + std::to_string(total) +
                          " runs; run that shard again");
  }
  std::string csv = header + "\n";
  for (std::uint64_t k = 0; k < total; ++k) csv += rows[k % count][k / count] + "\n";
  std::filesystem::create_directories(out_dir);
  write_text(out_dir / "sweep.csv", csv);
  write_text(out_dir / "sweep.json", merged_json.dump(2) + "\n");
}

}  // namespace pstwin::cli
