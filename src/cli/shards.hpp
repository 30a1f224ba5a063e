// `--shard I/N` of `pstwin explore` and `pstwin sweep`: one machine (or one mpirun/srun rank) runs
// every N-th run of the whole, and `pstwin merge` puts the shards' files back together exactly as one
// unsharded run writes them (docs/SWEEP.md, "Shards").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace pstwin::cli {

struct Shard {
  std::uint64_t index = 0;  // I: runs k with k mod N = I
  std::uint64_t count = 1;  // N

  bool holds(std::uint64_t run) const { return run % count == index; }
  // "explore-shard-1-of-4.json": the file a shard writes instead of explore.json.
  std::string file_name(std::string_view stem, std::string_view extension) const;
};

// "I/N" (0 <= I < N <= 65536), or "launcher": I and N from the launcher's rank and size
// (OMPI_COMM_WORLD_RANK and _SIZE of mpirun, SLURM_PROCID and SLURM_NTASKS of srun) in `environment`.
// Throws ScenarioError naming --shard, the value and a fix.
Shard parse_shard(const std::string& text, const std::map<std::string, std::string>& environment);

// The shards' files in `dir` put back together in `out_dir`, as one unsharded run writes them:
// explore.json from explore-shard-I-of-N.json, or sweep.csv and sweep.json from
// sweep-shard-I-of-N.{csv,json}. nullopt: `dir` holds no shard files. Throws ScenarioError for
// shards of different runs, a shard given twice or missing (naming the file to make), or a file
// that is not a shard.
enum class ShardKind { kExplore, kSweep };
std::optional<ShardKind> shard_kind(const std::filesystem::path& dir);
void merge_explore_shards(const std::filesystem::path& dir, const std::filesystem::path& out_dir);
void merge_sweep_shards(const std::filesystem::path& dir, const std::filesystem::path& out_dir);

}  // namespace pstwin::cli
