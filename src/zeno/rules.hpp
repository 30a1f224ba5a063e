// Robust aggregation rules over flat float32 updates: the validator's and the server's decisions.
// Pure functions: candidates in, aggregate and one decision per candidate out. Candidate i is worker i's
// update (the caller orders them by worker index); every sum runs in that order and every tie is
// broken by that index, so the same inputs give the same bytes. Units of rho and epsilon: docs/ZENO.md.
//
// Non-finite candidates (NaN or Inf anywhere, e.g. after a bit-flip) are rejected by every rule except
// `mean`, the undefended baseline, which averages whatever it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pstwin::zeno {

enum class RuleKind {
  kMean,              // plain average
  kMedian,            // coordinate-wise median
  kTrimmedMean,       // coordinate-wise, b dropped at each end
  kKrum,              // the one candidate closest to its n - f - 2 neighbours
  kMultiKrum,         // the m best Krum scores, averaged
  kCenteredClipping,  // Karimireddy et al. 2021: clip each candidate's distance to a moving centre
  kZeno,              // Xie et al. ICML'19: loss-decrease score on a validation batch, drop the b lowest
  kZenoPs,            // ZenoPS sync validator: <u,v> > rho ||v||^2 and ||u||^2 < c ||v||^2
  kZenoPlusPlus,      // Zeno++ async: gamma <v,g> - rho ||g||^2 >= -gamma eps, g rescaled to ||v||
  kValidationOnly,    // baseline: the validator's own update v, every candidate dropped (ZenoPS fig. 7)
};

struct RuleInfo {
  RuleKind kind;
  std::string_view name;  // what a scenario writes
  std::string_view summary;
};

std::span<const RuleInfo> rule_infos();
// Throws std::invalid_argument naming the value and listing every valid name.
RuleKind parse_rule(std::string_view name);

// Why a candidate ended up where it did.
enum class Verdict : std::uint8_t {
  kAccepted,      // in the aggregate with its full weight
  kDropped,       // ranked out: lowest Zeno scores, not among Krum's selection, or below Zeno++'s bar
  kReversed,      // Zeno++ with reverse_rejected: failed the test, applied negated and scaled
  kInnerProduct,  // ZenoPS: <u,v> <= rho ||v||^2
  kNorm,          // ZenoPS: ||u||^2 >= c ||v||^2
  kNonFinite,     // NaN or Inf in the candidate
};

// The verdict as results.json writes it: accepted, dropped, reversed, inner_product, norm, non_finite.
std::string_view verdict_name(Verdict verdict);

struct Decision {
  bool accepted = false;
  // The candidate's coefficient in the aggregate (aggregate = sum_i weight_i * u_i for whole-model
  // rules), averaged over coordinates for coordinate-wise and per-tensor rules; centered clipping
  // reports its last iteration's coefficient.
  double weight = 0;
  double score = 0;  // the rule's own measure; rule_infos() and docs/ZENO.md say which
  Verdict verdict = Verdict::kAccepted;
};

// One tensor of a flat model: elements [offset, offset + size).
struct TensorSlice {
  std::size_t offset = 0;
  std::size_t size = 0;
};

struct Aggregate {
  std::vector<float> value;
  std::vector<Decision> decisions;  // one per candidate, in candidate order
  // ZenoPS per tensor only: candidate-major, decisions for (candidate c, tensor t) at c * tensors + t.
  std::vector<Decision> tensor_decisions;
  std::size_t tensors = 1;
  std::size_t accepted() const;  // candidates with accepted == true
};

struct TrimmedMeanConfig {
  std::size_t trim = 1;  // b: values dropped at each end of every coordinate
};

struct KrumConfig {
  std::size_t byzantine = 1;  // f: needs at least 2f + 3 candidates
  std::size_t select = 1;     // m (multi-krum only): 1 <= m <= n - f
};

struct CenteredClippingConfig {
  double tau = 1.0;            // clipping radius, in the units of the update (L2 norm)
  std::size_t iterations = 3;  // L >= 1
};

struct ZenoConfig {
  double gamma = 0.1;    // step of the trial update x - gamma u (the server's learning rate)
  double rho = 0.0005;   // loss units per squared update norm (< 0: favours long updates)
  std::size_t drop = 1;  // b: lowest scores dropped, < number of candidates
};

struct ZenoPsConfig {
  double rho = 0.0;         // dimensionless: accept needs <u,v> > rho ||v||^2
  double norm_bound = 1.6;  // c: accept needs ||u||^2 < c ||v||^2 (> 0)
  bool per_tensor = true;   // score each tensor on its own (needs a tensor layout; none = whole model)
};

enum class ZenoPlusPlusScaling { kRescale, kClip, kNone };

struct ZenoPlusPlusConfig {
  double gamma = 0.1;    // learning rate (> 0)
  double rho = 0.001;    // learning-rate units (>= 0)
  double epsilon = 0.1;  // squared-gradient units, summed over elements (>= 0)
  ZenoPlusPlusScaling scaling = ZenoPlusPlusScaling::kRescale;  // g to ||v||: always, only down, never
  // kClip shortens g to at most clip_factor ||v||: above 1 it leaves honest lengths alone and still
  // bounds what an accepted long update (a sign-flip x4 that slipped through) can do.
  double clip_factor = 1.0;
  // ZenoPS's behaviour, off by default: a rejected g is applied as -reverse_scale * |cos(g,v)| * g.
  bool reverse_rejected = false;
  double reverse_scale = 0.4;  // in (0, 1]
};

ZenoPlusPlusScaling parse_scaling(std::string_view name);

struct RuleConfig {
  RuleKind kind = RuleKind::kMean;
  TrimmedMeanConfig trimmed_mean{};
  KrumConfig krum{};
  CenteredClippingConfig centered_clipping{};
  ZenoConfig zeno{};
  ZenoPsConfig zenops{};
  ZenoPlusPlusConfig zenopp{};
};

// Checks the fields the selected rule reads; std::invalid_argument naming the field, value and fix.
void validate(const RuleConfig& config);

// Validation loss f_r at a parameter vector (Zeno). Called in candidate order.
using LossFn = std::function<double(std::span<const float> params)>;

using Candidates = std::span<const std::span<const float>>;

// What the rules read besides the candidates; each rule names the fields it needs when they are missing.
struct RuleInputs {
  Candidates candidates{};
  std::span<const float> reference{};      // v: the validator's own update (ZenoPS) or gradient (Zeno++)
  std::span<const float> params{};         // x: current model (Zeno)
  LossFn loss{};                           // f_r (Zeno)
  std::span<const TensorSlice> tensors{};  // layout, ascending and covering the model (ZenoPS per tensor)
  std::span<const float> center{};         // centered clipping's start (empty: zeros)
};

// Dispatches to the rule `config.kind` names. Throws std::invalid_argument on bad config or inputs.
Aggregate aggregate(const RuleConfig& config, const RuleInputs& inputs);

// The rules one by one (aggregate() calls these). Zeno++ judges each candidate on its own, as if it
// arrived alone in async mode, and averages the accepted steps (sync rounds; one candidate gives exactly
// the async step).
Aggregate mean(Candidates candidates);
Aggregate coordinate_median(Candidates candidates);
Aggregate trimmed_mean(Candidates candidates, const TrimmedMeanConfig& config);
Aggregate krum(Candidates candidates, const KrumConfig& config, bool multi);
Aggregate centered_clipping(Candidates candidates, std::span<const float> center,
                            const CenteredClippingConfig& config);
Aggregate zeno(Candidates candidates, std::span<const float> params, const LossFn& loss,
               const ZenoConfig& config);
Aggregate zenops(Candidates candidates, std::span<const float> reference,
                 std::span<const TensorSlice> tensors, const ZenoPsConfig& config);
Aggregate zeno_plus_plus(Candidates candidates, std::span<const float> reference,
                         const ZenoPlusPlusConfig& config);
// The validation-only baseline: v as the aggregate, whatever the candidates say (each one kDropped).
Aggregate validation_only(Candidates candidates, std::span<const float> reference);

}  // namespace pstwin::zeno
