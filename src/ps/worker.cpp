#include "ps/worker.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/assert.hpp"
#include "core/codec.hpp"
#include "ps/ids.hpp"
#include "ps/staging.hpp"

namespace pstwin {

Worker::Worker(NodeContext context, int rank, WorkerOptions options, const JobShape& job,
               const TrainingModel* training, std::unique_ptr<DeviceTensors> device)
    : PsNode(context, Role::kWorker, rank),
      options_(std::move(options)),
      workload_(job.workload),
      training_(training),
      device_(std::move(device)),
      plan_(job.plan),
      compute_stage_(context.runtime.executor("compute", 1)),
      copy_stage_(context.runtime.executor("copy", 1)),
      decisions_(!options_.load_balanced
                     ? nullptr
                     : std::make_unique<DecisionBook>(workload_.partitions(), options_.servers,
                                                      options_.aggregates ? options_.workers : 0)),
      kv_(context.runtime,
          KvClientOptions{.servers = options_.servers,
                          .scheduling_credit = options_.scheduling_credit,
                          .fused = options_.fused,
                          .rank = rank},
          workload_, decisions_.get(), context.runtime.executor("push", 1),
          [this](const PartitionSpec& partition, std::uint32_t iteration, std::span<float> out) {
            fill_push(partition, iteration, out);
          }),
      groups_(job.groups) {
  // The scenario keeps the device to the synthetic workload with staging (Validator::check_device).
  PSTWIN_ASSERT(!device_ || (!training_ && options_.staging), "device tensors need synthetic staging");
  if (training_) {
    gradients_ = training_->worker(rank);
    const auto initial = training_->initial_parameters();
    params_.assign(initial.begin(), initial.end());
    grad_.assign(initial.size(), 0.0f);
  }
  if (decisions_ && options_.aggregates) {
    // Trained keys never move to a worker (the scenario refuses lb.worker_aggregators with training).
    PSTWIN_ASSERT(!training_, "a worker aggregator with a training model");
    aggregator_ = std::make_unique<Aggregator>(rt_, options_.aggregator, observer_, job, UpdateRule::sum(),
                                               rt_.executor("engine", options_.aggregator.engine_threads),
                                               "worker aggregator " + std::to_string(rank));
    intake_ = std::make_unique<RangeIntake>(rt_, options_.intake, observer_, workload_, *decisions_, monitor_,
                                            false);
  }
  if (groups_.active() && groups_.members(groups_.root_of(rank)).size() > 1 &&
      options_.host_reduce.device_group) {
    // The scenario keeps "nccl" to workload.device = "cuda" (Validator::check_local_reduce).
    PSTWIN_ASSERT(device_ != nullptr, "ps.local_reduce = nccl without device tensors");
    DeviceReduce::Hooks hooks{
        .push = [this](const PartitionSpec& partition, Payload payload,
                       std::string buffer) { kv_.push(partition, std::move(payload), std::move(buffer)); },
        .deliver =
            [this](Message aggregate) {
              if (!device_reduce_->is_root()) {
                --pushes_unacked_;  // the root pushed it for this worker
                observer_.pull_received(rank_, aggregate.header.key, iteration_, aggregate.payload);
              }
              apply_pull(std::move(aggregate));  // already in this worker's device tensors
            },
    };
    device_reduce_ =
        std::make_unique<DeviceReduce>(rt_, options_.host_reduce, workload_, groups_, rank, *device_,
                                       copy_stage_, rt_.executor("reduce", 1), std::move(hooks));
  } else if (groups_.active() && groups_.members(groups_.root_of(rank)).size() > 1) {
    HostReduce::Hooks hooks{
        .fill = [this](const PartitionSpec& partition, std::uint32_t iteration,
                       std::span<float> out) { fill_push(partition, iteration, out); },
        .push = [this](const PartitionSpec& partition, Payload payload,
                       std::string buffer) { kv_.push(partition, std::move(payload), std::move(buffer)); },
        .deliver =
            [this](Message aggregate) {
              --pushes_unacked_;  // the root pushed it for this worker
              on_pull_response(std::move(aggregate));
            },
    };
    host_reduce_ = std::make_unique<HostReduce>(rt_, options_.host_reduce, workload_, groups_, rank,
                                                copy_stage_, rt_.executor("reduce", 1), std::move(hooks));
  }
  if (options_.layerwise) {
    for (const auto& partition : workload_.partitions()) {
      const auto tensor = static_cast<std::size_t>(partition.tensor);
      if (tensor >= tensor_parts_.size()) tensor_parts_.resize(tensor + 1);
      tensor_parts_[tensor].push_back(&partition);
    }
    tensor_pulls_left_.assign(tensor_parts_.size(), 0);
    std::vector<double> bytes(tensor_parts_.size(), 0);
    for (const auto& partition : workload_.partitions())
      bytes[static_cast<std::size_t>(partition.tensor)] += static_cast<double>(partition.bytes);
    const double total = static_cast<double>(workload_.model_bytes());
    for (double b : bytes) tensor_share_.push_back(total > 0 ? b / total : 0);
  }
}

void Worker::on_ready() {
  if (device_reduce_) device_reduce_->start();
  training_start_ = rt_.now();
  snapshot_model();
  report_start_decisions(decisions_.get());
  if (!tensor_parts_.empty()) {
    iteration_start_ = rt_.now();
    start_layerwise_compute();
    return;
  }
  start_iteration(rt_.now());
}

// Training: the simulator charges the step's FLOPs at the host's speed (and a GPU step's copies at
// cluster.pcie_bandwidth) and the real backend ignores them; both run the real step in a task's `work`,
// which owns params_ and grad_ until `done`.
ComputeCost Worker::iteration_cost() {
  ComputeCost cost{training_ ? 0 : options_.compute_s, training_ ? gradients_->flops_per_step() : 0};
  if (training_) cost.device_seconds = pcie_seconds(options_.step_copy_bytes);
  if (options_.compute_jitter_s > 0)
    cost.seconds += rt_.random("worker.compute_jitter").uniform(0, options_.compute_jitter_s);
  return cost;
}

void Worker::start_layerwise_compute() {
  layer_cost_ = iteration_cost();
  next_forward_ = 0;
  try_forward();
}

// Forward of tensor t needs t's pull of the previous iteration (a tensor's layer computes with its
// own parameters only); the real gradient step runs with the last forward, when all are in.
void Worker::try_forward() {
  if (forwarding_ || next_forward_ >= tensor_parts_.size() || tensor_pulls_left_[next_forward_] > 0) return;
  forwarding_ = true;
  const double share = options_.forward_share * tensor_share_[next_forward_];
  const bool last = next_forward_ + 1 == tensor_parts_.size();
  std::function<void()> work;
  if (training_ && last) work = [this] { gradients_->step(compute_iteration_, params_, grad_); };
  submit_compute("forward", {layer_cost_.seconds * share, layer_cost_.flops * share}, std::move(work),
                 [this, last] {
                   forwarding_ = false;
                   ++next_forward_;
                   if (!last) {
                     try_forward();
                     return;
                   }
                   pulls_outstanding_ = workload_.partitions().size();
                   pushes_unacked_ = workload_.partitions().size();
                   run_backward(static_cast<int>(tensor_parts_.size()) - 1);
                 });
}

void Worker::run_backward(int tensor) {
  const double share = (1 - options_.forward_share) * tensor_share_[static_cast<std::size_t>(tensor)];
  compute_stage_.submit(0, "backward", {layer_cost_.seconds * share, layer_cost_.flops * share}, {},
                        [this, tensor] {
                          stage_tensor(tensor);
                          if (tensor > 0) {
                            run_backward(tensor - 1);
                            return;
                          }
                          if (static_cast<int>(++compute_iteration_) < options_.iterations)
                            start_layerwise_compute();
                        });
}

void Worker::stage_tensor(int tensor) {
  const auto& parts = tensor_parts_[static_cast<std::size_t>(tensor)];
  tensor_pulls_left_[static_cast<std::size_t>(tensor)] = parts.size();
  for (const auto* partition : parts) stage_and_push(*partition);
}

void Worker::start_iteration(Seconds started) {
  iteration_start_ = started;
  if (decisions_) follow_decision_weights(*decisions_->find(iteration_));
  if (!plan_.participates(rank_, iteration_)) {
    pull_only();
    return;
  }
  std::function<void()> work;
  if (training_) work = [this] { gradients_->step(iteration_, params_, grad_); };
  submit_compute("compute", iteration_cost(), std::move(work), [this] {
    pulls_outstanding_ = workload_.partitions().size();
    pushes_unacked_ = 0;
    for (const auto& partition : workload_.partitions())
      pushes_unacked_ += plan_.pushes(rank_, iteration_, partition.tensor) ? 1 : 0;
    for (const auto& partition : workload_.partitions()) {
      if (plan_.pushes(rank_, iteration_, partition.tensor))
        stage_and_push(partition);
      else
        kv_.pull(partition);  // dropped tensor: the round's aggregate only
    }
  });
}

void Worker::pull_only() {
  pulls_outstanding_ = workload_.partitions().size();
  pushes_unacked_ = 0;
  for (const auto& partition : workload_.partitions()) kv_.pull(partition);
}

void Worker::keep_unsent_steps(std::uint32_t round) {
  if (!training_ || !plan_.active() || !plan_.participates(rank_, round)) return;
  for (int tensor = 0; tensor < plan_.tensors(); ++tensor) {
    if (plan_.pushes(rank_, round, tensor)) continue;
    std::size_t size = 0;
    for (const auto& partition : workload_.partitions())
      if (partition.tensor == tensor) size += partition.bytes / sizeof(float);
    const auto offset = training_->tensor_offset(tensor);
    std::vector<float> velocity(size, 0.0f);  // a plain step: no momentum carried
    training_->apply(std::span(params_).subspan(offset, size),
                     std::span<const float>(grad_).subspan(offset, size), velocity, round);
  }
}

std::size_t Worker::element_offset(const PartitionSpec& partition) const {
  return training_->tensor_offset(partition.tensor) + partition.offset / sizeof(float);
}

void Worker::fill_push(const PartitionSpec& partition, std::uint32_t iteration, std::span<float> out) const {
  if (!training_) {
    workload_.fill(rank_, iteration, partition.key, out);
    return;
  }
  const auto grad = std::span<const float>(grad_).subspan(element_offset(partition), out.size());
  std::copy(grad.begin(), grad.end(), out.begin());
}

// Every train.eval_every iterations (and at the start and the end) worker 0 hands its replica to the
// observers, which evaluate it after the run: evaluation never delays an iteration.
void Worker::snapshot_model() {
  if (!training_ || rank_ != 0) return;
  const int every = options_.eval_every;
  const auto done = static_cast<int>(iteration_);
  const bool due = done == 0 || done == options_.iterations || (every > 0 && done % every == 0);
  if (due) observer_.model_snapshot(rank_, iteration_, rt_.now() - training_start_, params_);
}

std::shared_ptr<ByteBuffer> Worker::staging_buffer(const PartitionSpec& partition) {
  auto& region = staging_[partition.key];
  if (!region) {
    const auto name = staging_buffer_name(options_.staging_naming, options_.staging_job, Role::kWorker, rank_,
                                          partition.key);
    region = rt_.staging().open(name, partition.bytes);
  }
  return region;
}

void Worker::stage_and_push(const PartitionSpec& partition) {
  if (device_reduce_) {
    device_reduce_->stage(partition, iteration_);
    return;
  }
  if (host_reduce_) {
    host_reduce_->stage(partition, iteration_);
    return;
  }
  const bool phantom = options_.phantom;
  if (!options_.staging) {
    if (!phantom && !training_) {
      kv_.push_filled_on_release(partition, iteration_);
      return;
    }
    Payload payload = Payload::phantom(partition.bytes);
    if (!phantom) {
      auto buffer = std::make_shared<ByteBuffer>(partition.bytes, ByteBuffer::ForOverwrite{});
      fill_push(partition, iteration_, buffer->floats());
      payload = Payload::adopt(std::move(buffer));
    }
    kv_.push(partition, std::move(payload));
    return;
  }
  // Copy-in and push-out are separate executor steps, as in BytePS: whatever another process
  // writes into a shared buffer between them is what gets sent.
  std::shared_ptr<ByteBuffer> region = phantom ? nullptr : staging_buffer(partition);
  const std::uint32_t iteration = iteration_;
  // Named in the trace, so two workers' copies into one shared buffer show as the same name.
  std::string buffer =
      staging_buffer_name(options_.staging_naming, options_.staging_job, Role::kWorker, rank_, partition.key);
  auto staged = [this, region, &partition, phantom, buffer] {
    kv_.push(partition, phantom ? Payload::phantom(partition.bytes) : Payload::live_view(region), buffer);
  };
  if (device_) {
    // The values are produced on the device (the backward pass's output), then copied device -> host
    // into the staging buffer: a PCIe copy, which the simulator charges and the real backend does.
    auto copy_in = [this, region, &partition, iteration] {
      if (!region) return;
      device_->produce(partition, iteration);
      device_->copy_out(partition, region);
    };
    submit_device_work(copy_stage_, "copy", ComputeCost{.device_seconds = pcie_seconds(partition.bytes)},
                       std::move(copy_in), std::move(staged));
    return;
  }
  const ComputeCost copy_cost{static_cast<double>(partition.bytes) / options_.copy_bandwidth_Bps, 0};
  auto copy_in = [this, region, &partition, iteration] {
    if (region) fill_push(partition, iteration, region->floats());
  };
  copy_stage_.submit_tagged(0, "copy", copy_cost, std::move(copy_in), std::move(staged),
                            SpanTags{partition.key, iteration, rank_, std::move(buffer), partition.bytes});
}

void Worker::submit_compute(std::string_view label, ComputeCost cost, std::function<void()> work,
                            std::function<void()> done) {
  if (!work) {
    compute_stage_.submit(0, label, cost, {}, std::move(done));
    return;
  }
  pstwin::submit_device_work(rt_, compute_stage_, label, cost, std::move(work), std::move(done),
                             "worker " + std::to_string(rank_));
}

Seconds Worker::pcie_seconds(std::uint64_t bytes) const {
  return static_cast<double>(bytes) / options_.pcie_bandwidth_Bps;
}

void Worker::submit_device_work(Executor& stage, std::string_view label, ComputeCost cost,
                                std::function<void()> work, std::function<void()> done) {
  pstwin::submit_device_work(rt_, stage, label, cost, std::move(work), std::move(done),
                             "worker " + std::to_string(rank_) + " (" + device_->describe() + ")");
}

void Worker::on_decision(const Message& message) {
  const LbDecision* decision = take_decision(decisions_.get(), message);
  if (!decision) return;
  if (intake_)
    for (auto& request : intake_->release(*decision)) serve(std::move(request));
  if (awaiting_decision_ && decision->iteration == iteration_) {
    awaiting_decision_ = false;
    start_iteration(iteration_start_);
  }
}

void Worker::on_app_message(Message message) {
  if (message.header.command == Command::kLbDecision) {
    on_decision(message);
    return;
  }
  if (message.header.command == Command::kLocalReduce) {
    if (device_reduce_)
      device_reduce_->on_message(message);
    else if (host_reduce_)
      host_reduce_->on_message(message);
    else
      rt_.log("worker " + std::to_string(rank_) + ": ignoring local_reduce from node " +
              std::to_string(message.header.sender) + ": this worker reduces with no other");
    return;
  }
  if (!message.header.is_response) {
    if (!intake_) {
      rt_.log("worker: unexpected request " + std::string(command_name(message.header.command)));
      return;
    }
    if (auto admitted = intake_->admit(std::move(message))) serve(std::move(*admitted));
    return;
  }
  if (message.header.iteration != iteration_) {
    rt_.fail("worker " + std::to_string(rank_) + " got a " +
             std::string(command_name(message.header.command)) + " response for iteration " +
             std::to_string(message.header.iteration) + " during iteration " + std::to_string(iteration_));
    return;
  }
  switch (message.header.command) {
    case Command::kPush:
      if (kv_.on_push_ack(message)) --pushes_unacked_;
      return;
    case Command::kPushPull:
      // The acknowledgement and the aggregate in one reply.
      if (!kv_.on_push_pull_reply(message)) return;
      --pushes_unacked_;
      on_pull_response(std::move(message));
      return;
    default:
      on_pull_response(std::move(message));
  }
}

namespace {

// Bytes per peer as integer weights, the heaviest 1000 (sim's pool quantum makes that one partition).
std::vector<PeerWeight> weights_from_bytes(const std::map<NodeId, double>& bytes) {
  double most = 0;
  for (const auto& [node, b] : bytes) most = std::max(most, b);
  std::vector<PeerWeight> weights;
  for (const auto& [node, b] : bytes)
    weights.push_back({node, static_cast<std::uint32_t>(std::max(1.0, std::round(1000 * b / most)))});
  return weights;
}

}  // namespace

void Worker::follow_decision_weights(const LbDecision& decision) {
  if (decision.version == weights_version_) return;
  weights_version_ = decision.version;
  if (decision.probe) {
    // FPT v2.5: no shaping while probing, so the monitors measure what the links carry unshaped.
    rt_.set_send_weights(decision.version, {});
    rt_.set_receive_weights(decision.version, {});
    return;
  }
  // A worker exchanges the same bytes with each peer both ways: its push to an owner comes back as the
  // owner's aggregate, and its own range's aggregate goes to each worker whose push it received. So one
  // table shapes both what it sends (the pool) and what it receives (many owners into one downlink).
  const int servers = options_.servers;
  const int mine = slot_of(rt_.self(), servers);
  std::map<NodeId, double> bytes;
  const auto partitions = workload_.partitions();
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const auto wire = static_cast<double>(partitions[i].bytes + kHeaderBytes);
    if (decision.owner[i] != mine) {
      bytes[slot_node(decision.owner[i], servers)] += wire;
      continue;
    }
    for (int w = 0; w < options_.workers; ++w)
      if (worker_id(w) != rt_.self()) bytes[worker_id(w)] += wire;
  }
  // An aggregator answers a key only once every worker's push of it is in, so its last replies follow
  // our last push by about one partition at our connection's rate: one partition more per connection
  // finishes each push stream that much before the replies must (a slow server's tail, docs/FPT.md).
  std::uint64_t largest = 0;
  for (const auto& partition : partitions) largest = std::max(largest, partition.bytes + kHeaderBytes);
  for (auto& [node, b] : bytes) b += static_cast<double>(largest);
  const auto weights = weights_from_bytes(bytes);
  rt_.set_send_weights(decision.version, weights);
  rt_.set_receive_weights(decision.version, weights);
}

void Worker::serve(Message request) {
  aggregator_->handle(std::move(request));
}

void Worker::on_pull_response(Message message) {
  // Our own range's aggregate crosses no link (worker aggregators): not measured.
  if (decisions_ && message.header.sender != rt_.self())
    monitor_.received(iteration_, message.header.sender, message.payload.size() + kHeaderBytes, rt_.now());
  observer_.pull_received(rank_, message.header.key, iteration_, message.payload);
  if (device_reduce_ && device_reduce_->is_root()) {
    // To the device and every member's by the group's broadcast; DeviceReduce then completes the pull.
    device_reduce_->share(std::move(message));
    return;
  }
  if (host_reduce_ && host_reduce_->is_root() && !host_reduce_->share(message)) return;
  if (device_) {
    // The aggregate goes back to the device (host -> device on the copy lane) before the pull counts.
    const auto& partition = workload_.partition(message.header.key);
    const Seconds cost = pcie_seconds(message.payload.size());
    auto to_device = [this, &partition, payload = message.payload] {
      if (!payload.is_phantom()) device_->copy_in(partition, payload.floats());
    };
    submit_device_work(copy_stage_, "pull copy", ComputeCost{.device_seconds = cost}, std::move(to_device),
                       [this, message = std::move(message)]() mutable { apply_pull(std::move(message)); });
    return;
  }
  apply_pull(std::move(message));
}

void Worker::apply_pull(Message message) {
  if (training_) {
    const auto& partition = workload_.partition(message.header.key);
    if (message.payload.size() != partition.bytes) {
      rt_.fail("worker " + std::to_string(rank_) + " pulled " + std::to_string(message.payload.size()) +
               " bytes for key " + std::to_string(partition.key) + ", expected " +
               std::to_string(partition.bytes));
      return;
    }
    const auto values = message.payload.floats();
    std::copy(values.begin(), values.end(),
              params_.begin() + static_cast<std::ptrdiff_t>(element_offset(partition)));
  }
  if (!tensor_parts_.empty()) {
    const auto tensor = static_cast<std::size_t>(workload_.partition(message.header.key).tensor);
    if (--tensor_pulls_left_[tensor] == 0 && tensor == next_forward_) {
      if (--pulls_outstanding_ == 0) on_model_received();
      try_forward();
      return;
    }
  }
  if (--pulls_outstanding_ == 0) on_model_received();
}

// The whole model of iteration_ is in. An iteration's time runs from the previous one's model to
// this (in layerwise mode the next forward may already be running).
void Worker::on_model_received() {
  observer_.iteration_done(rank_, iteration_, iteration_start_, rt_.now());
  if (decisions_)
    send_to(kSchedulerId, Command::kLbReport, MessageHeader{}, encode_report(monitor_.take(iteration_)));
  ++iteration_;
  kv_.set_iteration(iteration_);
  if (host_reduce_) host_reduce_->set_iteration(iteration_);
  if (device_reduce_) device_reduce_->set_iteration(iteration_);
  snapshot_model();  // the global model: worker 0's own unsent steps are not evaluated
  keep_unsent_steps(iteration_ - 1);
  if (static_cast<int>(iteration_) >= options_.iterations) {
    send_to(kSchedulerId, Command::kWorkerDone, MessageHeader{});
    return;
  }
  if (decisions_) {
    // An aggregator still serves the previous iteration's pulls of its range (ps.push_pull =
    // separate): no worker pushes iteration i+1 before all its pulls of i were answered.
    decisions_->forget_before(aggregator_ ? iteration_ - 1 : iteration_);
    if (!decisions_->find(iteration_)) {
      // The next iteration's decision is still on its way: wait, and count the wait.
      awaiting_decision_ = true;
      iteration_start_ = rt_.now();
      return;
    }
  }
  if (tensor_parts_.empty())
    start_iteration(rt_.now());
  else
    iteration_start_ = rt_.now();
}

std::string Worker::describe_app_state() const {
  std::ostringstream out;
  out << "iteration " << iteration_ << " of " << options_.iterations << ": " << pushes_unacked_
      << " pushes unacknowledged, " << pulls_outstanding_ << " pulls outstanding";
  if (awaiting_decision_) out << "; waiting for the load balancer's decision for it";
  if (aggregator_) out << "; aggregator: " << aggregator_->describe();
  if (host_reduce_) out << "; " << host_reduce_->describe();
  if (device_reduce_) out << "; " << device_reduce_->describe();
  return out.str();
}

}  // namespace pstwin
