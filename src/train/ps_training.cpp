#include "train/ps_training.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "train/idx_dataset.hpp"
#include "train/local_sgd.hpp"
#include "train/shard_trainer.hpp"

namespace pstwin::train {
namespace {

// One round of an honest worker: train.local_steps SGD steps at the round's learning rate.
class ShardGradients final : public GradientSource {
 public:
  ShardGradients(const MlpTraining& training, const ImageDataset& data, std::vector<std::uint32_t> shard,
                 std::size_t batch, RandomStream batches, int local_steps,
                 std::unique_ptr<DeviceMlpStep> device)
      : training_(training),
        trainer_(training.model(), data, std::move(shard), batch, batches, std::move(device)),
        local_(local_steps),
        momentum_(training.worker_momentum()) {}
  void step(std::uint32_t round, std::span<const float> params, std::span<float> grad) override {
    local_.run(trainer_, params, grad, training_.learning_rate(round));
    if (momentum_) momentum_->apply(params, grad);
  }
  double flops_per_step() const override { return trainer_.flops_per_step() * local_.steps(); }

 private:
  const MlpTraining& training_;
  ShardTrainer trainer_;
  LocalSgd local_;
  std::optional<WorkerMomentum> momentum_;
};

// A missing or damaged data set is bad input: name the field that points at it.
const ImageDataset& load(const Scenario& scenario, Split split) {
  try {
    return shared_fashion_mnist(split, scenario.train.dataset);
  } catch (const DatasetError& e) {
    throw ScenarioError("train.dataset = \"" + scenario.train.dataset + "\": " + e.what());
  }
}

}  // namespace

MlpTraining::MlpTraining(const Scenario& scenario, MlpStepFactory device_step)
    : scenario_(scenario),
      device_step_(std::move(device_step)),
      model_(std::vector<std::size_t>(scenario.train.layers.begin(), scenario.train.layers.end())),
      sgd_{.learning_rate = static_cast<float>(scenario.train.learning_rate),
           .momentum = static_cast<float>(scenario.train.momentum),
           .weight_decay = static_cast<float>(scenario.train.weight_decay)},
      server_sgd_(sgd_),
      initial_(model_.parameter_count()) {
  if (scenario.train.worker_momentum) {
    server_sgd_.momentum = 0;
    server_sgd_.weight_decay = 0;
  }
  try {
    validate(sgd_);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(std::string("[train]: ") + e.what());
  }
  RandomStream init(scenario.seed, "train.init");
  model_.initialize(initial_, init);
  // The PS partitions the scenario's declared tensors: they must be this model's, in this order.
  const auto declared = scenario.declared_tensor_bytes();
  const auto tensors = model_.tensors();
  bool same = declared.size() == tensors.size();
  for (std::size_t t = 0; same && t < tensors.size(); ++t) same = declared[t] == 4 * tensors[t].size();
  if (!same) throw std::logic_error("declared tensors differ from the MLP's tensors");
}

std::size_t MlpTraining::tensor_offset(int tensor) const {
  return model_.tensors()[static_cast<std::size_t>(tensor)].offset;
}

const ShardSet& MlpTraining::shards() const {
  std::call_once(shards_once_, [this] {
    const ImageDataset& data = load(scenario_, Split::kTrain);
    ShardConfig config{
        .workers = scenario_.roles.workers,
        .validators = scenario_.roles.validators,
        .validator_samples = static_cast<std::size_t>(scenario_.zeno.validator_samples),
        .kind = scenario_.train.sharding == ShardingKind::kIid ? ShardKind::kIid : ShardKind::kDirichlet,
        .alpha = scenario_.train.dirichlet_alpha,
        .min_worker_samples = static_cast<std::size_t>(scenario_.train.batch),
        .seed = scenario_.seed};
    try {
      shards_ = make_shards(data.labels(), kFashionMnistClasses, config);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(std::string("train.sharding: ") + e.what() +
                          "; raise train.dirichlet_alpha or lower train.batch or roles.workers");
    }
  });
  return *shards_;
}

std::unique_ptr<GradientSource> MlpTraining::worker(int rank) const {
  const ImageDataset& data = load(scenario_, Split::kTrain);
  const auto& shard = shards().workers.at(static_cast<std::size_t>(rank));
  const auto batch = static_cast<std::size_t>(scenario_.train.batch);
  if (shard.size() < batch)
    throw ScenarioError("train.batch = " + std::to_string(batch) + ": larger than worker " +
                        std::to_string(rank) + "'s shard of " + std::to_string(shard.size()) +
                        " images; lower train.batch or roles.workers");
  std::unique_ptr<DeviceMlpStep> device;
  if (device_step_) {
    try {
      device = device_step_(model_.layers(), batch, rank);
    } catch (const DeviceError& e) {
      throw DeviceError("worker " + std::to_string(rank) + ": workload.device = \"cuda\": " + e.what());
    }
  }
  return std::make_unique<ShardGradients>(
      *this, data, shard, batch,
      RandomStream(scenario_.seed, "train.batches", static_cast<std::uint64_t>(rank)),
      scenario_.train.local_steps, std::move(device));
}

float MlpTraining::learning_rate(std::uint32_t iteration) const {
  if (scenario_.train.lr_schedule != "cosine") return sgd_.learning_rate;
  const double total = std::max(1, scenario_.workload.iterations);
  const double t = std::min(1.0, iteration / total);
  const double floor = scenario_.train.lr_final;
  return static_cast<float>(sgd_.learning_rate *
                            (floor + (1 - floor) * 0.5 * (1 + std::cos(std::numbers::pi * t))));
}

void MlpTraining::apply(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
                        std::uint32_t iteration) const {
  SgdConfig config = server_sgd_;
  config.learning_rate = learning_rate(iteration);
  sgd_step(params, grad, velocity, config);
}

std::optional<WorkerMomentum> MlpTraining::worker_momentum() const {
  if (!scenario_.train.worker_momentum) return std::nullopt;
  return WorkerMomentum(sgd_.momentum, sgd_.weight_decay);
}

const ImageDataset& MlpTraining::train_data() const {
  return load(scenario_, Split::kTrain);
}

std::unique_ptr<ShardTrainer> MlpTraining::trainer(std::span<const std::uint32_t> shard, std::size_t batch,
                                                   RandomStream batches) const {
  return std::make_unique<ShardTrainer>(
      model_, train_data(), std::vector<std::uint32_t>(shard.begin(), shard.end()), batch, batches);
}

double MlpTraining::test_accuracy(std::span<const float> params) const {
  const ImageDataset& test = load(scenario_, Split::kTest);
  MlpWorkspace ws = model_.workspace(500);
  return model_.evaluate(params, test, ws).accuracy;
}

std::unique_ptr<TrainingModel> make_training(const Scenario& scenario) {
  if (scenario.workload.kind != WorkloadKind::kMlp) return nullptr;
  return std::make_unique<MlpTraining>(scenario);
}

}  // namespace pstwin::train
