#include "zeno/rules.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>  // index_sequence

#include "zeno/config_support.hpp"
#include "zeno/vector_math.hpp"

namespace pstwin::zeno {

namespace {

constexpr std::array kRules = {
    RuleInfo{RuleKind::kMean, "mean", "plain average; score 0"},
    RuleInfo{RuleKind::kMedian, "median", "coordinate-wise median; score = share of coordinates it supplied"},
    RuleInfo{RuleKind::kTrimmedMean, "trimmed-mean",
             "coordinate-wise mean without the b lowest and b highest; score = share of coordinates kept"},
    RuleInfo{RuleKind::kKrum, "krum", "the candidate with the lowest Krum score (sum of squared distances)"},
    RuleInfo{RuleKind::kMultiKrum, "multi-krum", "mean of the m lowest Krum scores"},
    RuleInfo{RuleKind::kCenteredClipping, "centered-clipping",
             "centre moved by clipped differences; score = last distance to the centre"},
    RuleInfo{RuleKind::kZeno, "zeno", "drop the b lowest f(x) - f(x - gamma u) - rho ||u||^2"},
    RuleInfo{RuleKind::kZenoPs, "zenops",
             "accept <u,v> > rho ||v||^2 and ||u||^2 < c ||v||^2; score <u,v>/||v||^2"},
    RuleInfo{RuleKind::kZenoPlusPlus, "zeno++",
             "accept gamma <v,g> - rho ||g||^2 >= -gamma eps after scaling g; score = left minus right side"},
    RuleInfo{RuleKind::kValidationOnly, "validation-only",
             "baseline: the validator's own update v, every candidate dropped; score <u,v>/||v||^2"},
};

constexpr std::array<Named<ZenoPlusPlusScaling>, 3> kScalings = {{{ZenoPlusPlusScaling::kRescale, "rescale"},
                                                                  {ZenoPlusPlusScaling::kClip, "clip"},
                                                                  {ZenoPlusPlusScaling::kNone, "none"}}};

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument(message);
}

// The model size every candidate shares; errors name the rule and the odd candidate out.
std::size_t model_size(std::string_view rule, Candidates candidates) {
  if (candidates.empty()) bad(std::string(rule) + ": no candidates to aggregate: pass at least one update");
  const std::size_t size = candidates[0].size();
  for (std::size_t c = 1; c < candidates.size(); ++c) {
    if (candidates[c].size() != size) {
      bad(std::string(rule) + ": candidate " + std::to_string(c) + " has " +
          std::to_string(candidates[c].size()) + " floats but candidate 0 has " + std::to_string(size) +
          ": every candidate must cover the same model");
    }
  }
  return size;
}

// A vector the rule trusts (v, x, the centre): the model's size and finite, or a clear error.
void check_reference(std::string_view rule, std::string_view field, std::span<const float> vector,
                     std::size_t want) {
  if (vector.size() != want) {
    bad(std::string(rule) + ": " + std::string(field) + " has " + std::to_string(vector.size()) +
        " floats but the candidates have " + std::to_string(want) +
        (vector.empty() ? ": this rule needs it, pass it in RuleInputs" : ": pass one of the model's size"));
  }
  if (!std::isfinite(squared_norm(vector))) {
    bad(std::string(rule) + ": " + std::string(field) +
        " has NaN or Inf elements: it must come from a run that has not diverged (lower the learning rate)");
  }
}

std::vector<bool> finite_flags(Candidates candidates) {
  std::vector<bool> finite(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) finite[c] = std::isfinite(squared_norm(candidates[c]));
  return finite;
}

Decision non_finite() {
  return {.accepted = false, .weight = 0, .score = 0, .verdict = Verdict::kNonFinite};
}

Aggregate with_weights(Candidates candidates, std::size_t size, std::vector<Decision> decisions) {
  std::vector<double> weights(decisions.size());
  for (std::size_t c = 0; c < decisions.size(); ++c) weights[c] = decisions[c].weight;
  Aggregate result;
  result.value = weighted_sum(candidates, weights, size);
  result.decisions = std::move(decisions);
  return result;
}

// Candidates sorted by score, best first; equal scores keep worker-index order. NaN ranks last.
std::vector<std::size_t> rank_descending(std::span<const double> scores) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto key = [&](std::size_t c) {
    return std::isnan(scores[c]) ? -std::numeric_limits<double>::infinity() : scores[c];
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
  return order;
}

// Odd-even transposition sort of K keys held in registers: K passes of independent min/max pairs, fully
// unrolled (K is a constant), so there is no branch to mispredict and no store-to-load chain.
template <std::size_t K>
void sort_network(std::uint64_t* data) {
  std::array<std::uint64_t, K> keys;
  std::copy_n(data, K, keys.begin());
#pragma GCC unroll 16
  for (std::size_t pass = 0; pass < K; ++pass) {
#pragma GCC unroll 8
    for (std::size_t j = pass % 2; j + 1 < K; j += 2) {
      // Swap by mask, not min/max: GCC turns those into branches here.
      const std::uint64_t diff = (keys[j] ^ keys[j + 1]) & (0 - std::uint64_t{keys[j + 1] < keys[j]});
      keys[j] ^= diff;
      keys[j + 1] ^= diff;
    }
  }
  std::copy_n(keys.begin(), K, data);
}

template <std::size_t... K>
constexpr auto make_networks(std::index_sequence<K...>) {
  return std::array<void (*)(std::uint64_t*), sizeof...(K)>{&sort_network<K>...};
}

// Columns of up to 16 values (the worker counts we run) use the networks; larger ones std::sort.
constexpr std::size_t kNetworkMax = 16;
constexpr auto kNetworks = make_networks(std::make_index_sequence<kNetworkMax + 1>());

// One coordinate's finite values sorted by (value, worker index). Each is packed into one 64-bit key
// whose unsigned order is that order (the float's bits made monotonic in the high half, the index in the
// low half), so small columns sort with branchless compare-exchanges instead of mispredicted branches.
class SortedColumn {
 public:
  void fill(Candidates candidates, std::span<const std::size_t> live, std::size_t element) {
    keys_.resize(live.size());
    for (std::size_t k = 0; k < live.size(); ++k) {
      const auto bits = std::bit_cast<std::uint32_t>(candidates[live[k]][element]);
      const std::uint32_t monotonic = (bits & kSign) != 0 ? ~bits : bits | kSign;
      keys_[k] = (std::uint64_t{monotonic} << 32) | live[k];
    }
    if (keys_.size() <= kNetworkMax) {
      kNetworks[keys_.size()](keys_.data());
    } else {
      std::sort(keys_.begin(), keys_.end());
    }
  }
  std::size_t size() const { return keys_.size(); }
  double value(std::size_t k) const {
    const auto monotonic = static_cast<std::uint32_t>(keys_[k] >> 32);
    return std::bit_cast<float>((monotonic & kSign) != 0 ? monotonic ^ kSign : ~monotonic);
  }
  std::size_t candidate(std::size_t k) const { return static_cast<std::size_t>(keys_[k] & 0xffffffffu); }

 private:
  static constexpr std::uint32_t kSign = 0x80000000u;
  std::vector<std::uint64_t> keys_;
};

// Coordinate-wise order statistics: for every coordinate, sorts the finite candidates' values and hands
// the column to `pick`, which returns the aggregate's value and adds each used candidate's coefficient.
template <typename Pick>
Aggregate coordinate_wise(std::string_view rule, Candidates candidates, Pick pick) {
  const std::size_t size = model_size(rule, candidates);
  const std::vector<bool> finite = finite_flags(candidates);
  std::vector<std::size_t> live;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (finite[c]) live.push_back(c);
  }
  Aggregate result;
  result.value.assign(size, 0.0f);
  result.decisions.assign(candidates.size(), non_finite());
  if (live.empty()) return result;

  std::vector<double> coefficient(candidates.size(), 0.0);
  std::vector<std::size_t> used(candidates.size(), 0);
  SortedColumn column;
  for (std::size_t i = 0; i < size; ++i) {
    column.fill(candidates, live, i);
    result.value[i] = static_cast<float>(pick(column, coefficient, used));
  }
  for (const std::size_t c : live) {
    result.decisions[c] = {
        .accepted = true,
        .weight = size == 0 ? 0.0 : coefficient[c] / static_cast<double>(size),
        .score = size == 0 ? 0.0 : static_cast<double>(used[c]) / static_cast<double>(size),
        .verdict = Verdict::kAccepted};
  }
  return result;
}

// Tensor layout for ZenoPS: ascending, contiguous, covering [0, size). Empty: the whole model.
std::vector<TensorSlice> checked_layout(std::span<const TensorSlice> tensors, std::size_t size) {
  if (tensors.empty()) return {TensorSlice{0, size}};
  std::size_t next = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].offset != next) {
      bad("zenops: tensor " + std::to_string(t) + " starts at element " + std::to_string(tensors[t].offset) +
          " but the previous tensor ends at " + std::to_string(next) +
          ": list the tensors in order, back to back, covering the whole model");
    }
    next += tensors[t].size;
  }
  if (next != size) {
    bad("zenops: the tensor layout covers " + std::to_string(next) + " elements but the candidates have " +
        std::to_string(size) + ": the layout must cover the whole model");
  }
  return {tensors.begin(), tensors.end()};
}

}  // namespace

std::size_t Aggregate::accepted() const {
  return static_cast<std::size_t>(
      std::count_if(decisions.begin(), decisions.end(), [](const Decision& d) { return d.accepted; }));
}

std::span<const RuleInfo> rule_infos() {
  return kRules;
}

RuleKind parse_rule(std::string_view name) {
  std::array<Named<RuleKind>, kRules.size()> names{};
  for (std::size_t i = 0; i < kRules.size(); ++i) names[i] = {kRules[i].kind, kRules[i].name};
  return parse_in<RuleKind>(names, name, "aggregation rule");
}

ZenoPlusPlusScaling parse_scaling(std::string_view name) {
  return parse_in<ZenoPlusPlusScaling>(kScalings, name, "zeno++ scaling");
}

void validate(const RuleConfig& config) {
  switch (config.kind) {
    case RuleKind::kMean:
    case RuleKind::kMedian:
    case RuleKind::kTrimmedMean:  // b against the candidate count: checked when candidates arrive
      return;
    case RuleKind::kKrum:
    case RuleKind::kMultiKrum:
      require_field(config.kind == RuleKind::kKrum || config.krum.select >= 1, "krum.select",
                    static_cast<double>(config.krum.select), "multi-krum selects at least 1 candidate");
      return;
    case RuleKind::kCenteredClipping: {
      const CenteredClippingConfig& c = config.centered_clipping;
      require_field(std::isfinite(c.tau) && c.tau > 0, "centered_clipping.tau", c.tau,
                    "use a finite radius > 0");
      require_field(c.iterations >= 1, "centered_clipping.iterations", static_cast<double>(c.iterations),
                    "use at least 1 iteration");
      return;
    }
    case RuleKind::kZeno: {
      const ZenoConfig& c = config.zeno;
      require_field(std::isfinite(c.gamma) && c.gamma > 0, "zeno.gamma", c.gamma, "use a finite step > 0");
      require_field(std::isfinite(c.rho), "zeno.rho", c.rho,
                    "use a finite value (> 0 favours short updates, < 0 long ones)");
      return;
    }
    case RuleKind::kZenoPs: {
      const ZenoPsConfig& c = config.zenops;
      require_field(std::isfinite(c.rho), "zenops.rho", c.rho,
                    "use a finite value (ZenoPS swept -0.1 to 0.1)");
      require_field(std::isfinite(c.norm_bound) && c.norm_bound > 0, "zenops.norm_bound", c.norm_bound,
                    "use a finite bound > 0 (ZenoPS: 1.6)");
      return;
    }
    case RuleKind::kZenoPlusPlus: {
      const ZenoPlusPlusConfig& c = config.zenopp;
      require_field(std::isfinite(c.gamma) && c.gamma > 0, "zenopp.gamma", c.gamma,
                    "use a finite learning rate > 0");
      require_field(std::isfinite(c.rho) && c.rho >= 0, "zenopp.rho", c.rho, "use a finite value >= 0");
      require_field(std::isfinite(c.epsilon) && c.epsilon >= 0, "zenopp.epsilon", c.epsilon,
                    "use a finite value >= 0");
      require_field(std::isfinite(c.clip_factor) && c.clip_factor > 0, "zenopp.clip_factor", c.clip_factor,
                    "use a finite factor > 0 (1: clip to ||v||)");
      require_field(!c.reverse_rejected || (c.reverse_scale > 0 && c.reverse_scale <= 1),
                    "zenopp.reverse_scale", c.reverse_scale, "use a value in (0, 1] (ZenoPS: 0.4)");
      return;
    }
    case RuleKind::kValidationOnly:
      return;
  }
  bad("unknown rule kind " + std::to_string(static_cast<int>(config.kind)));
}

// Each rule validates its own config, so calling one directly is as safe as going through here.
Aggregate aggregate(const RuleConfig& config, const RuleInputs& in) {
  switch (config.kind) {
    case RuleKind::kMean:
      return mean(in.candidates);
    case RuleKind::kMedian:
      return coordinate_median(in.candidates);
    case RuleKind::kTrimmedMean:
      return trimmed_mean(in.candidates, config.trimmed_mean);
    case RuleKind::kKrum:
      return krum(in.candidates, config.krum, false);
    case RuleKind::kMultiKrum:
      return krum(in.candidates, config.krum, true);
    case RuleKind::kCenteredClipping:
      return centered_clipping(in.candidates, in.center, config.centered_clipping);
    case RuleKind::kZeno:
      return zeno(in.candidates, in.params, in.loss, config.zeno);
    case RuleKind::kZenoPs:
      return zenops(in.candidates, in.reference, in.tensors, config.zenops);
    case RuleKind::kZenoPlusPlus:
      return zeno_plus_plus(in.candidates, in.reference, config.zenopp);
    case RuleKind::kValidationOnly:
      return validation_only(in.candidates, in.reference);
  }
  bad("unknown rule kind " + std::to_string(static_cast<int>(config.kind)));
}

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kAccepted:
      return "accepted";
    case Verdict::kDropped:
      return "dropped";
    case Verdict::kReversed:
      return "reversed";
    case Verdict::kInnerProduct:
      return "inner_product";
    case Verdict::kNorm:
      return "norm";
    case Verdict::kNonFinite:
      return "non_finite";
  }
  return "unknown";
}

Aggregate mean(Candidates candidates) {
  const std::size_t size = model_size("mean", candidates);
  const double w = 1.0 / static_cast<double>(candidates.size());
  return with_weights(candidates, size,
                      std::vector<Decision>(candidates.size(), {.accepted = true, .weight = w, .score = 0}));
}

Aggregate coordinate_median(Candidates candidates) {
  return coordinate_wise(
      "median", candidates,
      [](const SortedColumn& column, std::vector<double>& coefficient, std::vector<std::size_t>& used) {
        const std::size_t k = column.size();
        // Odd: the middle value. Even: the mean of the two middle values, half a share each.
        const std::size_t first = (k - 1) / 2, last = k / 2;
        const double share = first == last ? 1.0 : 0.5;
        for (std::size_t j = first; j <= last; ++j) {
          coefficient[column.candidate(j)] += share;
          ++used[column.candidate(j)];
        }
        return 0.5 * (column.value(first) + column.value(last));
      });
}

Aggregate trimmed_mean(Candidates candidates, const TrimmedMeanConfig& config) {
  validate(RuleConfig{.kind = RuleKind::kTrimmedMean, .trimmed_mean = config});
  if (!candidates.empty() && 2 * config.trim >= candidates.size()) {
    bad("trimmed-mean: trimmed_mean.trim = " + std::to_string(config.trim) + " drops " +
        std::to_string(2 * config.trim) + " of " + std::to_string(candidates.size()) +
        " values per coordinate: use trim < n / 2 or add workers");
  }
  return coordinate_wise(
      "trimmed-mean", candidates,
      [&](const SortedColumn& column, std::vector<double>& coefficient, std::vector<std::size_t>& used) {
        // Non-finite candidates are already out: trim at most what keeps one value.
        const std::size_t trim = std::min(config.trim, (column.size() - 1) / 2);
        const std::size_t kept = column.size() - 2 * trim;
        const double w = 1.0 / static_cast<double>(kept);
        double sum = 0;
        for (std::size_t k = trim; k < trim + kept; ++k) {
          sum += column.value(k);
          coefficient[column.candidate(k)] += w;
          ++used[column.candidate(k)];
        }
        return sum * w;
      });
}

Aggregate krum(Candidates candidates, const KrumConfig& config, bool multi) {
  validate(RuleConfig{.kind = multi ? RuleKind::kMultiKrum : RuleKind::kKrum, .krum = config});
  const std::string_view rule = multi ? "multi-krum" : "krum";
  const std::size_t size = model_size(rule, candidates);
  const std::size_t n = candidates.size();
  const std::size_t f = config.byzantine;
  if (n < 2 * f + 3) {
    bad(std::string(rule) + ": krum.byzantine = " + std::to_string(f) +
        " needs at least 2f + 3 = " + std::to_string(2 * f + 3) + " candidates, got " + std::to_string(n) +
        ": lower krum.byzantine or add workers");
  }
  const std::size_t select = multi ? config.select : 1;
  if (select < 1 || select > n - f) {
    bad(std::string(rule) + ": krum.select = " + std::to_string(select) + " must be in [1, n - f] = [1, " +
        std::to_string(n - f) + "]: choose fewer candidates to average");
  }
  const std::vector<bool> finite = finite_flags(candidates);
  // A non-finite candidate is infinitely far from everyone (its computed distance would be NaN).
  constexpr double kFar = std::numeric_limits<double>::infinity();
  std::vector<double> distance(n * n, 0.0);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = a + 1; b < n; ++b) {
      const double d = finite[a] && finite[b] ? squared_distance(candidates[a], candidates[b]) : kFar;
      distance[a * n + b] = distance[b * n + a] = d;
    }
  }
  std::vector<double> scores(n);
  std::vector<double> others;
  for (std::size_t a = 0; a < n; ++a) {
    others.clear();
    for (std::size_t b = 0; b < n; ++b) {
      if (b != a) others.push_back(distance[a * n + b]);
    }
    std::sort(others.begin(), others.end());  // values only: ties cannot change the sum
    scores[a] = finite[a] ? std::accumulate(others.begin(),
                                            others.begin() + static_cast<std::ptrdiff_t>(n - f - 2), 0.0)
                          : kFar;
  }
  // Lowest score first, ties by worker index; never a non-finite candidate.
  std::vector<double> negated(n);
  for (std::size_t c = 0; c < n; ++c) negated[c] = -scores[c];
  std::vector<std::size_t> chosen;
  for (const std::size_t c : rank_descending(negated)) {
    if (chosen.size() < select && finite[c]) chosen.push_back(c);
  }
  std::vector<Decision> decisions(n);
  for (std::size_t c = 0; c < n; ++c) {
    decisions[c] =
        finite[c] ? Decision{.accepted = false, .weight = 0, .score = scores[c], .verdict = Verdict::kDropped}
                  : non_finite();
  }
  for (const std::size_t c : chosen) {
    decisions[c].accepted = true;
    decisions[c].weight = 1.0 / static_cast<double>(chosen.size());
    decisions[c].verdict = Verdict::kAccepted;
  }
  return with_weights(candidates, size, std::move(decisions));
}

Aggregate centered_clipping(Candidates candidates, std::span<const float> center,
                            const CenteredClippingConfig& config) {
  validate(RuleConfig{.kind = RuleKind::kCenteredClipping, .centered_clipping = config});
  const std::size_t size = model_size("centered-clipping", candidates);
  if (!center.empty()) check_reference("centered-clipping", "center", center, size);
  const std::vector<bool> finite = finite_flags(candidates);
  const std::size_t live = static_cast<std::size_t>(std::count(finite.begin(), finite.end(), true));
  Aggregate result;
  result.value =
      center.empty() ? std::vector<float>(size, 0.0f) : std::vector<float>(center.begin(), center.end());
  result.decisions.assign(candidates.size(), non_finite());
  if (live == 0) return result;

  std::vector<double> factor(candidates.size(), 0.0);
  std::vector<double> next(size);
  for (std::size_t iteration = 0; iteration < config.iterations; ++iteration) {
    // v <- v + (1/n) sum_i min(1, tau / ||x_i - v||) (x_i - v), over the finite candidates in order.
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (!finite[c]) continue;
      const double d = std::sqrt(squared_distance(candidates[c], result.value));
      factor[c] = d > config.tau ? config.tau / d : 1.0;
      result.decisions[c] = {.accepted = true,
                             .weight = factor[c] / static_cast<double>(live),
                             .score = d,
                             .verdict = Verdict::kAccepted};
    }
    std::copy(result.value.begin(), result.value.end(), next.begin());
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      if (!finite[c]) continue;
      const double w = factor[c] / static_cast<double>(live);
      const float* x = candidates[c].data();
      for (std::size_t i = 0; i < size; ++i) next[i] += w * (static_cast<double>(x[i]) - result.value[i]);
    }
    std::transform(next.begin(), next.end(), result.value.begin(),
                   [](double v) { return static_cast<float>(v); });
  }
  return result;
}

Aggregate zeno(Candidates candidates, std::span<const float> params, const LossFn& loss,
               const ZenoConfig& config) {
  validate(RuleConfig{.kind = RuleKind::kZeno, .zeno = config});
  const std::size_t size = model_size("zeno", candidates);
  check_reference("zeno", "params (the current model x)", params, size);
  if (!loss) bad("zeno: no validation loss f_r: pass RuleInputs::loss");
  if (config.drop >= candidates.size()) {
    bad("zeno: zeno.drop = " + std::to_string(config.drop) + " must be below the " +
        std::to_string(candidates.size()) + " candidates: lower zeno.drop or add workers");
  }
  const double base = loss(params);
  if (!std::isfinite(base)) {
    bad("zeno: the validation loss f_r(x) at the current model is " + std::to_string(base) +
        ": no candidate can be scored against it (the model diverged: lower the learning rate)");
  }
  std::vector<float> trial(size);
  std::vector<double> scores(candidates.size());
  std::vector<bool> finite(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const double norm2 = squared_norm(candidates[c]);
    finite[c] = std::isfinite(norm2);
    if (!finite[c]) {
      scores[c] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const float* u = candidates[c].data();
    for (std::size_t i = 0; i < size; ++i) {
      trial[i] =
          static_cast<float>(static_cast<double>(params[i]) - config.gamma * static_cast<double>(u[i]));
    }
    scores[c] = base - loss(trial) - config.rho * norm2;
  }
  const std::size_t keep = candidates.size() - config.drop;
  std::vector<Decision> decisions(candidates.size());
  std::size_t kept = 0;
  for (const std::size_t c : rank_descending(scores)) {
    const bool take = kept < keep && finite[c] && !std::isnan(scores[c]);
    kept += take ? 1 : 0;
    decisions[c] = finite[c] ? Decision{.accepted = take,
                                        .weight = 0,
                                        .score = scores[c],
                                        .verdict = take ? Verdict::kAccepted : Verdict::kDropped}
                             : non_finite();
  }
  for (Decision& d : decisions) {
    if (d.accepted) d.weight = 1.0 / static_cast<double>(kept);
  }
  Aggregate result = with_weights(candidates, size, std::move(decisions));
  return result;
}

Aggregate zenops(Candidates candidates, std::span<const float> reference,
                 std::span<const TensorSlice> tensors, const ZenoPsConfig& config) {
  validate(RuleConfig{.kind = RuleKind::kZenoPs, .zenops = config});
  const std::size_t size = model_size("zenops", candidates);
  check_reference("zenops", "reference (the validator's update v)", reference, size);
  const std::vector<TensorSlice> layout =
      config.per_tensor ? checked_layout(tensors, size) : std::vector<TensorSlice>{TensorSlice{0, size}};
  const std::size_t n = candidates.size();
  const std::size_t count = layout.size();

  Aggregate result;
  result.value.assign(size, 0.0f);
  result.tensors = count;
  result.tensor_decisions.resize(n * count);
  std::vector<Moments> whole(n);
  std::vector<double> weights(n);
  for (std::size_t t = 0; t < count; ++t) {
    const TensorSlice slice = layout[t];
    const auto v = reference.subspan(slice.offset, slice.size);
    std::size_t accepted = 0;
    for (std::size_t c = 0; c < n; ++c) {
      const Moments m = moments(candidates[c].subspan(slice.offset, slice.size), v);
      whole[c].uv += m.uv;
      whole[c].uu += m.uu;
      whole[c].vv += m.vv;
      Decision& d = result.tensor_decisions[c * count + t];
      d.score = m.vv > 0 ? m.uv / m.vv : 0.0;
      if (!std::isfinite(m.uu)) {
        d.verdict = Verdict::kNonFinite;
      } else if (!(m.uv > config.rho * m.vv)) {
        d.verdict = Verdict::kInnerProduct;
      } else if (!(m.uu < config.norm_bound * m.vv)) {
        d.verdict = Verdict::kNorm;
      } else {
        d.accepted = true;
        d.verdict = Verdict::kAccepted;
        ++accepted;
      }
    }
    // Average of the accepted; zero when none is (ZenoPS keeps the model unchanged then).
    for (std::size_t c = 0; c < n; ++c) {
      Decision& d = result.tensor_decisions[c * count + t];
      d.weight = d.accepted ? 1.0 / static_cast<double>(accepted) : 0.0;
      weights[c] = d.weight;
    }
    if (accepted == 0) continue;
    std::vector<std::span<const float>> parts(n);
    for (std::size_t c = 0; c < n; ++c) parts[c] = candidates[c].subspan(slice.offset, slice.size);
    const std::vector<float> sum = weighted_sum(parts, weights, slice.size);
    std::copy(sum.begin(), sum.end(), result.value.begin() + static_cast<std::ptrdiff_t>(slice.offset));
  }
  // Per candidate: accepted on every tensor; weight averaged over elements; score over the whole model;
  // verdict of its first rejected tensor.
  result.decisions.resize(n);
  for (std::size_t c = 0; c < n; ++c) {
    Decision& d = result.decisions[c];
    d.accepted = true;
    d.verdict = Verdict::kAccepted;
    double weight = 0;
    for (std::size_t t = 0; t < count; ++t) {
      const Decision& td = result.tensor_decisions[c * count + t];
      weight += td.weight * static_cast<double>(layout[t].size);
      if (!td.accepted && d.accepted) {
        d.accepted = false;
        d.verdict = td.verdict;
      }
    }
    d.weight = size == 0 ? 0.0 : weight / static_cast<double>(size);
    d.score = whole[c].vv > 0 ? whole[c].uv / whole[c].vv : 0.0;
  }
  if (!config.per_tensor) result.tensor_decisions.clear();
  return result;
}

Aggregate zeno_plus_plus(Candidates candidates, std::span<const float> reference,
                         const ZenoPlusPlusConfig& config) {
  validate(RuleConfig{.kind = RuleKind::kZenoPlusPlus, .zenopp = config});
  const std::size_t size = model_size("zeno++", candidates);
  check_reference("zeno++", "reference (the validator's gradient v)", reference, size);
  const std::size_t n = candidates.size();
  std::vector<Decision> decisions(n);
  std::size_t accepted = 0;
  for (std::size_t c = 0; c < n; ++c) {
    const Moments m = moments(candidates[c], reference);
    if (!std::isfinite(m.uu)) {
      decisions[c] = non_finite();
      continue;
    }
    // g_hat = s g with s from the scaling mode; the test and the applied step both use g_hat.
    double s = 1.0;
    if (config.scaling != ZenoPlusPlusScaling::kNone && m.uu > 0) {
      s = std::sqrt(m.vv / m.uu);
      if (config.scaling == ZenoPlusPlusScaling::kClip) s = std::min(config.clip_factor * s, 1.0);
    }
    const double score = config.gamma * s * m.uv - config.rho * s * s * m.uu + config.gamma * config.epsilon;
    Decision& d = decisions[c];
    d.score = score;
    if (score >= 0) {
      d = {.accepted = true, .weight = s, .score = score, .verdict = Verdict::kAccepted};
      ++accepted;
    } else if (config.reverse_rejected) {
      const double cosine = m.uu > 0 && m.vv > 0 ? m.uv / std::sqrt(m.uu * m.vv) : 0.0;
      d = {.accepted = false,
           .weight = -config.reverse_scale * std::abs(cosine) * s,
           .score = score,
           .verdict = Verdict::kReversed};
    } else {
      d.verdict = Verdict::kDropped;
    }
  }
  // Average over the accepted steps, not over all n: in sync rounds a rejected update must not shrink the
  // honest ones' step (3 of 8 rejected would cut the learning rate to 5/8). One candidate (async) is
  // unchanged: s g when accepted, nothing (or the reversed step) when not.
  const double share = 1.0 / static_cast<double>(std::max<std::size_t>(accepted, 1));
  for (Decision& d : decisions) d.weight *= share;
  return with_weights(candidates, size, std::move(decisions));
}

Aggregate validation_only(Candidates candidates, std::span<const float> reference) {
  const std::size_t size = model_size("validation-only", candidates);
  check_reference("validation-only", "reference (the validator's update v)", reference, size);
  std::vector<Decision> decisions(candidates.size());
  const double vv = dot(reference, reference);
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const double uv = dot(candidates[c], reference);
    if (!std::isfinite(uv)) {
      decisions[c] = non_finite();
      continue;
    }
    decisions[c] = {
        .accepted = false, .weight = 0, .score = vv > 0 ? uv / vv : 0.0, .verdict = Verdict::kDropped};
  }
  Aggregate result;
  result.value.assign(reference.begin(), reference.end());
  result.decisions = std::move(decisions);
  return result;
}

}  // namespace pstwin::zeno
