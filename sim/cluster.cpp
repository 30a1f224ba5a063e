#include "sim/cluster.hpp"

#include <algorithm>
#include <iostream>
#include <limits>
#include <sstream>

#include "core/assert.hpp"
#include "core/codec.hpp"
#include "sim/fifo_network.hpp"
#include "sim/flow_network.hpp"

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

// ---------------------------------------------------------------- SlotRanges

void SlotRanges::insert(std::uint32_t slot) {
  // The usual case: the slot right after the last range (a node table bound in the book's order).
  if (!ranges_.empty() && ranges_.back().second == slot) {
    ++ranges_.back().second;
    return;
  }
  // The first range that starts after `slot`; the one before it may hold or end at `slot`.
  auto next = std::upper_bound(ranges_.begin(), ranges_.end(), slot,
                               [](std::uint32_t s, const auto& range) { return s < range.first; });
  if (next != ranges_.begin()) {
    auto before = std::prev(next);
    if (slot < before->second) return;
    if (slot == before->second) {
      ++before->second;
      if (next != ranges_.end() && next->first == before->second) {
        before->second = next->second;
        ranges_.erase(next);
      }
      return;
    }
  }
  if (next != ranges_.end() && next->first == slot + 1) {
    next->first = slot;
    return;
  }
  ranges_.insert(next, {slot, slot + 1});
}

bool SlotRanges::contains(std::uint32_t slot) const {
  const auto next = std::upper_bound(ranges_.begin(), ranges_.end(), slot,
                                     [](std::uint32_t s, const auto& range) { return s < range.first; });
  return next != ranges_.begin() && slot < std::prev(next)->second;
}

// ---------------------------------------------------------------- AddressBook

const AddressBook::Entry& AddressBook::add(NodeId id, std::string_view address, SimNode& node) {
  if (const auto* known = find(id)) return *known;
  const auto slot = static_cast<std::uint32_t>(entries_.size());
  entries_.push_back({slot, std::string(address), &node});
  if (id >= 0 && id < kDenseIds) {
    const auto index = static_cast<std::size_t>(id);
    if (index >= dense_.size()) dense_.resize(index + 1, 0);
    dense_[index] = slot + 1;
  } else {
    sparse_.emplace(id, slot);
  }
  return entries_.back();
}

// ---------------------------------------------------------------- FlowSlots

void FlowSlots::release() {
  if (!limited_) return;
  if (waiting_.empty()) {
    ++free_;
    return;
  }
  auto go = std::move(waiting_.front());  // the slot passes straight to the longest waiter
  waiting_.pop_front();
  go();
}

// ---------------------------------------------------------------- Stream

Stream::Stream(SimNode& from, SimNode& to, NodeId to_id)
    : from_(from), to_(to), to_id_(to_id), lane_name_("send->" + std::to_string(to_id)) {
  if (from.cluster().network()) return;
  mutex_ = s4u::Mutex::create();
  ready_ = s4u::ConditionVariable::create();
  auto actor = create_actor(from.label() + " " + lane_name_, from.host(), [this] { run(); });
  actor->daemonize();
}

void Stream::enqueue(Message message) {
  queue_.emplace(send_order_key(message), std::move(message));
  if (ready_)
    ready_->notify_one();
  else if (!busy_)
    next();
}

void Stream::next() {
  if (queue_.empty()) {
    busy_ = false;
    return;
  }
  busy_ = true;
  current_ = std::move(queue_.begin()->second);
  queue_.erase(queue_.begin());
  const Seconds clogged = clog_wait();
  const double jitter = from_.cluster().scenario().perturbation.delivery_jitter_s;
  const Seconds delay =
      send_cpu_wait() + clogged + (jitter > 0 ? from_.random("net.delivery_jitter").uniform(0, jitter) : 0);
  if (delay > 0)
    from_.cluster().network()->after(delay, [this] { send_current(); });
  else
    send_current();
}

Seconds Stream::send_cpu_wait() {
  read_end_ = 0;
  const auto& cpu = from_.cluster().scenario().cpu;
  if (!cpu.charged()) return 0;
  const std::uint64_t bytes = kHeaderBytes + current_.payload.size();
  const Seconds cost = cpu.send_cost(bytes);
  const TraceMessage carried{current_.header.key, current_.header.iteration, bytes};
  const Seconds now = s4u::Engine::get_clock();
  const Seconds sent = cost > 0 ? from_.charge_net("send", cost, carried) : now;
  // TCP streams a message: the receiver copies its bytes out while the sender copies them in, so the
  // receive's per-byte part runs from the start of the send on the receiver's lane (once that is
  // free), not after the last byte arrived. Its per-message part waits for the arrival (deliver).
  if (const Seconds read = cpu.receive_bytes_cost(bytes); read > 0)
    read_end_ = to_.charge_net("receive", read, carried, sent - cost);
  return sent - now;
}

Seconds Stream::clog_wait() {
  auto& cluster = from_.cluster();
  if (cluster.scenario().faults.clogs.empty()) return 0;
  const Seconds now = s4u::Engine::get_clock();
  const Seconds release =
      cluster.faults().clog_release(now, {from_.label(), from_.host_name()}, {to_.label(), to_.host_name()});
  if (release <= now) return 0;
  auto& counts = cluster.fault_counts();
  ++counts.clogged;
  counts.clog_hold_s += release - now;
  return release - now;
}

void Stream::send_current() {
  begin();
  auto& network = *from_.cluster().network();
  if (current_.payload.empty()) {
    network.after(control_latency(), [this] {
      arrive();
      next();
    });
    return;
  }
  // The tighter of the sender's pacing and the receiver's shaping bounds the flow (0: no bound),
  // except where the receiver shapes by reading slower (the FIFO twin of the epoll van): that holds
  // the message after it crossed the links.
  const auto& sim = from_.cluster().scenario().sim;
  const bool shaped_on_read = sim.network_model == "fifo" && sim.fifo_host != "turns";
  const double receive_Bps = shaped_on_read ? 0 : to_.receive_rate(from_.self());
  const double bound_Bps = pacing_Bps_ > 0 && receive_Bps > 0 ? std::min(pacing_Bps_, receive_Bps)
                                                              : std::max(pacing_Bps_, receive_Bps);
  const double max_rate = bound_Bps > 0 ? bound_Bps : MessageNetwork::kUnbounded;
  const auto bytes = static_cast<double>(kHeaderBytes + current_.payload.size());
  if (!network.separates_sent() && sim.pipeline_messages) {
    // A byte stream (TCP): the sender puts a message's bytes on the wire right behind the previous
    // one's and they arrive a latency later, so the connection takes its next message once this one's
    // bytes are out and the latency is paid once per burst, not per message in turn. The flow is the
    // bytes' passage, the latency follows it.
    from_.flow_queue().acquire([this, &network, bytes, max_rate] {
      const bool bulk = !fpt::is_control(current_);
      auto in_flight = std::make_shared<Message>(std::move(current_));
      const double latency = route_latency();
      network.start(
          from_.host(), to_.host(), bytes, nullptr,
          [this, &network, in_flight, header = header_, start = start_, read = read_end_, bulk, latency] {
            from_.flow_queue().release();
            from_.transmitted(to_id_, bulk);
            next();
            network.after(latency, [this, in_flight, header, start, read] {
              deliver(std::move(*in_flight), header, start, read);
            });
          },
          max_rate, latency);
    });
    return;
  }
  if (!network.separates_sent()) {
    from_.flow_queue().acquire([this, &network, bytes, max_rate] {
      network.start(
          from_.host(), to_.host(), bytes, nullptr,
          [this] {
            from_.flow_queue().release();
            arrive();
            next();
          },
          max_rate);
    });
    return;
  }
  // Queues between sender and receiver: the connection takes its next message once the network
  // took this one (`sent`: the host's queue has it, or its last packet left the NIC), and this one
  // is delivered when its last packet arrives (and the receiver's shaping lets it be read).
  from_.flow_queue().acquire([this, &network, bytes, max_rate, shaped_on_read] {
    const bool bulk = !fpt::is_control(current_);
    auto in_flight = std::make_shared<Message>(std::move(current_));
    network.start(
        from_.host(), to_.host(), bytes,
        [this, bulk] {
          from_.flow_queue().release();
          from_.transmitted(to_id_, bulk);
          next();
        },
        [this, &network, in_flight, header = header_, start = start_, read = read_end_, bytes,
         shaped_on_read] {
          const double wait = shaped_on_read ? reader_delay(bytes) : 0;
          if (wait <= 0) {
            deliver(std::move(*in_flight), header, start, read);
            return;
          }
          network.after(wait, [this, in_flight, header, start, read] {
            deliver(std::move(*in_flight), header, start, read);
          });
        },
        max_rate);
  });
}

void Stream::run() {
  const double jitter = from_.cluster().scenario().perturbation.delivery_jitter_s;
  std::unique_lock lock(*mutex_);
  while (true) {
    while (queue_.empty()) ready_->wait(lock);
    current_ = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    if (const Seconds cpu = send_cpu_wait(); cpu > 0) s4u::this_actor::sleep_for(cpu);
    if (const Seconds clogged = clog_wait(); clogged > 0) s4u::this_actor::sleep_for(clogged);
    if (jitter > 0) s4u::this_actor::sleep_for(from_.random("net.delivery_jitter").uniform(0, jitter));
    begin();
    transmit(kHeaderBytes + current_.payload.size());
    arrive();
  }
}

void Stream::begin() {
  // The transport reads a zero-copy payload when it transmits it, not when it was queued.
  current_.payload = current_.payload.frozen();
  header_ = encode_header(current_.header, current_.payload, /*compute_crc=*/false);
  start_ = s4u::Engine::get_clock();
}

void Stream::arrive() {
  const bool bulk = !fpt::is_control(current_);
  if (deliver(std::move(current_), header_, start_, read_end_)) from_.transmitted(to_id_, bulk);
}

bool Stream::deliver(Message message, const HeaderBytes& header, Seconds start, Seconds read_end) {
  // The receiver decodes the header it was sent, exactly as a socket transport would.
  MessageHeader decoded;
  bool phantom = false;
  if (auto error = decode_header(header, decoded, phantom)) {
    to_.fail("rejected a frame from " + from_.label() + ": " + error->to_string());
    return false;
  }
  message.header = decoded;
  const std::uint64_t wire_bytes = kHeaderBytes + message.payload.size();
  auto& cluster = from_.cluster();
  const Seconds end = s4u::Engine::get_clock();
  cluster.account(from_, to_, decoded.command, wire_bytes, start, end);
  const auto name = std::string(command_name(decoded.command)) + (decoded.is_response ? " response" : "");
  const TraceMessage carried{decoded.key, decoded.iteration, wire_bytes};
  from_.trace_lane(lane_name_, "send", name, start, end, carried);
  // [faults]: the message crossed the wire; whether the receiver gets it, once or twice, is decided
  // here, where every network model hands a message over.
  auto fate = FaultPlan::Fate::kDeliver;
  if (cluster.faults().any() && decoded.sender != kNoNode) {
    if (cluster.faults().partitioned(end, {from_.label(), from_.host_name()},
                                     {to_.label(), to_.host_name()})) {
      ++cluster.fault_counts().partitioned;
      cluster.dropped(decoded, from_, to_, "faults.partitions");
      return true;
    }
    fate = cluster.faults().fate(
        decoded, [this](std::string_view purpose) -> RandomStream& { return from_.random(purpose); });
    if (fate == FaultPlan::Fate::kLose) {
      ++cluster.fault_counts().lost;
      cluster.dropped(decoded, from_, to_, "faults.loss");
      return true;
    }
  }
  to_.trace_lane("recv<-" + std::to_string(decoded.sender), "receive", name, start, end, carried);
  if (fate == FaultPlan::Fate::kDuplicate) {
    ++cluster.fault_counts().duplicated;
    to_.deliver(message, read_end);  // the copy arrives right behind the original, as a retransmission would
  }
  to_.deliver(std::move(message), read_end);
  return true;
}

double Stream::reader_delay(double bytes) {
  const double now = s4u::Engine::get_clock();
  const double rate = to_.receive_rate(from_.self());
  const double start = std::max(now, reader_free_at_);
  if (rate <= 0) {
    reader_free_at_ = start;
    return start - now;
  }
  const double depth = std::max(fpt::kReaderBurstMinBytes, rate * fpt::kReaderBurstSeconds);
  if (reader_tokens_ < 0) {
    reader_tokens_ = depth;
    reader_at_ = start;
  }
  reader_tokens_ = std::min(depth, reader_tokens_ + (start - reader_at_) * rate);
  const double wait = std::max(0.0, (bytes - reader_tokens_) / rate);
  reader_tokens_ += wait * rate - bytes;
  reader_at_ = reader_free_at_ = start + wait;
  return reader_free_at_ - now;
}

// A header-only message (ack, pull request, heartbeat) is 64 bytes: its cost is the route's
// latency. Modelling it as a flow would only add solver work, since every flow start and end
// re-solves the bandwidth shares of all flows it is coupled with.
double Stream::route_latency() {
  if (route_latency_ < 0) measure_route();
  return route_latency_;
}

double Stream::control_latency() {
  if (control_latency_ < 0) measure_route();
  return control_latency_;
}

// Both latencies from one route lookup: a stream per connection asked SimGrid twice (two million
// lookups at 8192 workers x 64 servers).
void Stream::measure_route() {
  std::vector<s4u::Link*> links;
  double latency = 0;
  from_.host()->route_to(to_.host(), links, &latency);
  double bandwidth = std::numeric_limits<double>::infinity();
  for (const auto* link : links) bandwidth = std::min(bandwidth, link->get_bandwidth());
  route_latency_ = latency * from_.cluster().latency_factor();
  control_latency_ = route_latency_ + (links.empty() ? 0 : static_cast<double>(kHeaderBytes) / bandwidth);
}

void Stream::transmit(std::uint64_t wire_bytes) {
  if (current_.payload.empty()) {
    s4u::this_actor::sleep_for(control_latency());
    return;
  }
  auto slots = from_.flow_slots();
  if (slots) slots->acquire();
  s4u::Comm::sendto(from_.host(), to_.host(), wire_bytes);
  if (slots) slots->release();
}

// ---------------------------------------------------------------- SimExecutor

SimExecutor::SimExecutor(SimNode& node, std::string name, int lanes) : node_(node), name_(std::move(name)) {
  for (int i = 0; i < lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->name = lanes == 1 ? name_ : name_ + "." + std::to_string(i);
    // A simcall, as creating a lane's condition variable was: a protocol built on an actor
    // (pstwin-simapp's processes) yields as often, so its runs keep their order of events.
    s4u::this_actor::yield();
    Lane* raw = lane.get();
    lane->actor =
        create_actor(node_.label() + " " + lane->name, node_.host(), [this, raw] { run_lane(*raw); });
    lane->actor->daemonize();
    lanes_.push_back(std::move(lane));
  }
}

void SimExecutor::submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                         std::function<void()> done) {
  auto& target = *lanes_.at(static_cast<std::size_t>(lane) % lanes_.size());
  target.tasks.push_back({std::string(label), cost, std::move(work), std::move(done)});
  wake(target);
}

void SimExecutor::submit_tagged(int lane, std::string_view label, ComputeCost cost,
                                std::function<void()> work, std::function<void()> done, SpanTags tags) {
  auto& target = *lanes_.at(static_cast<std::size_t>(lane) % lanes_.size());
  target.tasks.push_back({std::string(label), cost, std::move(work), std::move(done), std::move(tags)});
  wake(target);
}

void SimExecutor::wake(Lane& lane) {
  // One simcall either way: the yield orders the submitter after the lane it woke.
  if (lane.parked)
    lane.actor->resume();
  else
    s4u::this_actor::yield();
}

void SimExecutor::run_lane(Lane& lane) {
  const double jitter = node_.cluster().scenario().perturbation.executor_jitter_s;
  // A simcall answered at once (as taking a free lock is): the lane's first steps come after those of
  // the actors that start with it, an order the run's outputs depend on.
  s4u::this_actor::yield();
  while (true) {
    while (lane.tasks.empty()) {
      lane.parked = true;
      s4u::this_actor::suspend();
      lane.parked = false;
    }
    Task task = std::move(lane.tasks.front());
    lane.tasks.pop_front();
    if (jitter > 0) s4u::this_actor::sleep_for(node_.random("executor.jitter").uniform(0, jitter));
    const Seconds start = s4u::Engine::get_clock();
    if (const double factor = node_.cluster().faults().slow_factor(start, node_.label());
        factor != 1 && (task.cost.flops > 0 || task.cost.seconds > 0 || task.cost.device_seconds > 0)) {
      task.cost.flops *= factor;
      task.cost.seconds *= factor;
      task.cost.device_seconds *= factor;
      ++node_.cluster().fault_counts().slowed;
    }
    if (task.cost.flops > 0) s4u::this_actor::execute(task.cost.flops);
    if (task.cost.seconds + task.cost.device_seconds > 0)
      s4u::this_actor::sleep_for(task.cost.seconds + task.cost.device_seconds);
    if (task.work) task.work();
    node_.trace_lane(lane.name, name_, task.label, start, s4u::Engine::get_clock(),
                     task.tags ? std::optional(trace_message(*task.tags)) : std::nullopt);
    node_.post(std::move(task.done));
  }
}

// ---------------------------------------------------------------- HostStaging

std::shared_ptr<ByteBuffer> HostStaging::open(std::string_view name, std::size_t bytes) {
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->size() != bytes)
    it = regions_.insert_or_assign(std::string(name), std::make_shared<ByteBuffer>(bytes)).first;
  return it->second;
}

// ---------------------------------------------------------------- SimNode

SimNode::SimNode(Cluster& cluster, std::string label, std::string address, std::string host)
    : cluster_(cluster),
      label_(std::move(label)),
      address_(std::move(address)),
      host_name_(std::move(host)),
      host_(cluster.host(host_name_)),
      host_slot_(cluster.host_slot(host_name_)),
      pid_(static_cast<int>(cluster.nodes().size())),
      mutex_(s4u::Mutex::create()),
      wake_(s4u::ConditionVariable::create()),
      stopped_changed_(s4u::ConditionVariable::create()),
      flow_queue_(cluster.scenario().sim.node_flow_limit) {
  if (const int limit = cluster.scenario().sim.node_flow_limit; limit > 0 && !cluster.network())
    flow_slots_ = s4u::Semaphore::create(limit);
  cores_ = cluster.shared_cores(host_slot_);
  // A 256-byte quantum: a weight-1000 connection (the load balancer's heaviest) sends about one
  // 256 KB partition per DRR visit, lighter ones proportionally fewer.
  // With the flow model the pool paces at the NIC's rate (SendPool::pacing_rate: connections lighter
  // than the heaviest are held to their share); SimGrid's host-to-host transfers take no rate bound.
  if (cluster.scenario().sim.send_pool_slots > 0) {
    pool_ = std::make_unique<fpt::SendPool>(fpt::SendPoolOptions{
        .quantum_bytes = 256, .link_rate_Bps = cluster.network() ? cluster.uplink_rate(host_name_) : 0});
    // Links are full duplex with one bandwidth: the downlink's rate is the uplink's.
    if (cluster.network())
      receive_shaper_ = std::make_unique<fpt::ReceiveShaper>(cluster.uplink_rate(host_name_));
  }
}

void SimNode::spawn(Seconds start_delay) {
  create_actor(label_, host_, [this, start_delay] {
    if (start_delay > 0) s4u::this_actor::sleep_for(start_delay);
    started_ = true;
    run();
  });
}

void SimNode::run() {
  protocol_->start();
  std::unique_lock<s4u::Mutex> lock;  // a watched node's
  if (watched_)
    lock = std::unique_lock(*mutex_);
  else
    wakeup_.begin();
  while (!stopped_) {
    if (!events_.empty()) {
      auto event = std::move(events_.front());
      events_.pop_front();
      if (auto* message = std::get_if<Message>(&event))
        protocol_->on_message(std::move(*message));
      else
        std::get<std::function<void()>>(event)();
      continue;
    }
    if (timers_.empty()) {
      if (watched_)
        wake_->wait(lock);
      else
        wakeup_.wait();
      continue;
    }
    if (auto fire = timers_.pop_due(now())) {
      (*fire)();
      continue;
    }
    if (watched_)
      wake_->wait_until(lock, timers_.next_deadline());
    else
      wakeup_.wait_until(timers_.next_deadline());
  }
  if (!watched_) wakeup_.end();
}

void SimNode::wake() {
  if (watched_)
    wake_->notify_one();
  else
    wakeup_.notify();
}

void SimNode::deliver(Message message, Seconds read_end) {
  if (crashed_) {
    ++cluster_.fault_counts().crash_dropped;
    return;
  }
  if (message.header.command != Command::kHeartbeat) cluster_.progress();
  if (const auto& cpu = cluster_.scenario().cpu; cpu.charged()) {
    const std::uint64_t bytes = kHeaderBytes + message.payload.size();
    // A van whose lane is free and whose loop has nothing queued sleeps: it reads the message after
    // waking up. One that is busy finds it when it looks next, at no extra delay.
    const bool asleep = cpu.wakeup_s > 0 && net_free_at_ <= now() && events_.empty();
    const Seconds cost = cpu.receive_per_message_s;
    if (cost > 0 || asleep || read_end > now()) {
      // Handed over once the van read it (its bytes, booked when they were sent, and the message):
      // a timer of the node's loop, in the order charged (the lane ends are non-decreasing and equal
      // deadlines fire in the order added).
      const TraceMessage carried{message.header.key, message.header.iteration, bytes};
      // Waking is CPU work (the switch into the thread on the core it wakes on, its caches refilled),
      // so it takes a shared core from the nodes that are working (docs/FIDELITY.md).
      const Seconds woken = asleep ? charge_net("wakeup", cpu.wakeup_s, carried, now()) : now();
      const Seconds earliest = std::max(woken, read_end);
      const Seconds ready = cost > 0 ? charge_net("receive", cost, carried, earliest) : earliest;
      timers_.add(ready, [this, message = std::move(message)]() mutable {
        protocol_->on_message(std::move(message));
      });
      wake();
      return;
    }
  }
  events_.emplace_back(std::in_place_index<1>, std::move(message));
  wake();
}

Seconds SimNode::charge_net(std::string_view what, Seconds cost, const TraceMessage& message,
                            Seconds earliest) {
  Seconds start = std::max({now(), earliest, net_free_at_});
  if (cores_) start = cores_->book(now(), start, cost);
  net_free_at_ = start + cost;
  trace_lane("net", "cpu", what, start, net_free_at_, message);
  return net_free_at_;
}

void SimNode::post(std::function<void()> event) {
  if (!event || crashed_) return;
  events_.emplace_back(std::in_place_index<0>, std::move(event));
  wake();
}

void SimNode::set_self(NodeId id) {
  self_ = id;
}

void SimNode::connect(NodeId id, std::string_view address) {
  auto& book = cluster_.address_book();
  const auto* entry = book.find(id);
  if (entry && entry->address == address) {  // the usual case: another node bound it the same way
    if (!own_bindings_.empty()) own_bindings_.erase(id);
    bound_.insert(entry->slot);
    return;
  }
  // An address no node has binds nothing: the id keeps its binding, or stays unknown.
  SimNode* node = cluster_.find(address);
  if (!node) return;
  if (!entry) {
    own_bindings_.erase(id);
    bound_.insert(book.add(id, address, *node).slot);
    return;
  }
  own_bindings_[id] = node;
}

SimNode* SimNode::peer(NodeId id) const {
  if (const auto own = own_bindings_.find(id); own != own_bindings_.end()) return own->second;
  const auto* entry = cluster_.address_book().find(id);
  return entry && bound_.contains(entry->slot) ? entry->node : nullptr;
}

void SimNode::send(Message message) {
  message.header.sequence = next_sequence();
  send_numbered(std::move(message));
}

void SimNode::send_numbered(Message message) {
  if (crashed_) return;
  const NodeId to = message.header.recipient;
  // A binding is never undone: a node with a stream to `to` has it bound.
  const auto stream = streams_.find(to);
  if (stream == streams_.end() && !peer(to)) {
    fail(label_ + " has no connection to node " + std::to_string(to) + " (no address known for it)");
    return;
  }
  message.header.sender = self_;
  if (pool_ && !fpt::is_control(message)) {
    if (auto error = pool_->enqueue(to, std::move(message))) fail(label_ + ": send pool: " + *error);
    pump();
    return;
  }
  (stream != streams_.end() ? *stream->second : stream_to(to)).enqueue(std::move(message));
}

Stream& SimNode::stream_to(NodeId to) {
  auto& stream = streams_.try_emplace(to).first->second;
  if (!stream) {
    SimNode* node = peer(to);
    PSTWIN_ASSERT(node, label_ + " streams to node " + std::to_string(to) + ", which it never bound");
    stream = std::make_unique<Stream>(*this, *node, to);
  }
  return *stream;
}

void SimNode::pump() {
  while (pool_in_flight_ < cluster_.scenario().sim.send_pool_slots) {
    auto out = pool_->next();
    if (!out) return;
    ++pool_in_flight_;
    pool_->set_blocked(out->destination, true);  // one message per connection: the pool keeps the order
    auto& stream = stream_to(out->destination);
    stream.set_pacing(pool_->pacing_rate(out->destination));
    stream.enqueue(std::move(out->message));
  }
}

void SimNode::transmitted(NodeId to, bool bulk) {
  if (!pool_ || !bulk) return;
  --pool_in_flight_;
  pool_->set_blocked(to, false);
  pump();
}

void SimNode::set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  if (!pool_) return;
  if (auto error = pool_->set_weights(version, weights)) log(label_ + ": send weights refused: " + *error);
}

void SimNode::set_receive_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  if (!receive_shaper_) return;
  if (auto error = receive_shaper_->set_weights(version, weights))
    log(label_ + ": receive weights refused: " + *error);
}

Seconds SimNode::now() const {
  return s4u::Engine::get_clock();
}

TimerId SimNode::start_timer(Seconds delay, std::function<void()> fire) {
  const TimerId id = timers_.add(now() + delay, std::move(fire));
  wake();
  return id;
}

void SimNode::cancel_timer(TimerId id) {
  timers_.cancel(id);
}

RandomStream& SimNode::random(std::string_view purpose) {
  auto it = randoms_.find(purpose);
  if (it == randoms_.end())
    it = randoms_.emplace(std::string(purpose), RandomStream(cluster_.seed(), purpose, fnv1a64(address_)))
             .first;
  return it->second;
}

Executor& SimNode::executor(std::string_view name, int lanes) {
  auto it = executors_.find(name);
  if (it == executors_.end())
    it = executors_.emplace(std::string(name), std::make_unique<SimExecutor>(*this, std::string(name), lanes))
             .first;
  return *it->second;
}

StagingArea& SimNode::staging() {
  return cluster_.staging(host_name_);
}

void SimNode::trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) {
  trace_lane("main", category, name, start, end);
}

void SimNode::trace_tagged(std::string_view lane, std::string_view category, std::string_view name,
                           Seconds start, Seconds end, const SpanTags& tags) {
  trace_lane(lane, category, name, start, end, trace_message(tags));
}

void SimNode::trace_lane(std::string_view lane, std::string_view category, std::string_view name,
                         Seconds start, Seconds end, const std::optional<TraceMessage>& message) {
  cluster_.record_span({label_, category, name, start, end, message ? &*message : nullptr}, pid_, lane);
}

void SimNode::log(std::string_view text) {
  std::cerr << "[" << now() << " s] " << label_ << ": " << text << "\n";
}

void SimNode::crash() {
  if (crashed_ || stopped_) return;
  crashed_ = true;
  stopped_ = true;
  ++cluster_.fault_counts().crashed;
  log("crashed (faults.crashes)");
  // Its loop wakes, sees it stopped and ends; timers and queued events die with it. Messages already
  // handed to its connections still arrive, as the kernel sends what a killed process wrote.
  events_.clear();
  timers_ = TimerQueue{};
  wake();
}

void SimNode::stop() {
  stopped_ = true;
  cluster_.node_stopped();
  stopped_changed_->notify_all();
}

void SimNode::wait_stopped() {
  std::unique_lock lock(*mutex_);
  while (!stopped_) stopped_changed_->wait(lock);
}

void SimNode::fail(std::string text) {
  cluster_.fail(label_, text);
  stopped_ = true;
  cluster_.node_stopped();
  if (const auto& handler = cluster_.failure_handler()) handler();
  // One failure ends the run: stop every other actor, then this one.
  s4u::Actor::kill_all();
  s4u::this_actor::exit();
}

std::string SimNode::describe() const {
  if (crashed_) return label_ + ": crashed (faults.crashes)";
  if (stopped_) return label_ + ": stopped";
  if (!started_) return label_ + ": not started yet";
  return label_ + ": " + protocol_->describe_state();
}

// ---------------------------------------------------------------- Cluster

Cluster::Cluster(const Scenario& scenario, Platform& platform)
    : scenario_(scenario),
      platform_(platform),
      timeline_(platform.links.size(), 1e-3, 100),
      faults_(scenario) {
  if (scenario.sim.network_model == "flow") {
    if (scenario.network.model == "SMPI")
      throw ScenarioError(
          "sim.network_model = \"flow\" models LV08 and CM02 sharing, not network.model = \"SMPI\" (its "
          "factors depend on message size); use sim.network_model = \"simgrid\" or another network.model");
    network_ = std::make_unique<FlowNetwork>(platform.bandwidth_factor, platform.latency_factor,
                                             platform.cross_traffic > 0, platform.hosts.begin()->second);
  } else if (scenario.sim.network_model == "fifo") {
    FifoLinks::Options fifo;
    if (scenario.sim.fifo_host != "turns") fifo.host_queue = FifoLinks::HostQueue::kMessages;
    // SO_MAX_PACING_RATE after idling, as measured through tbf (docs/FPT.md): bursts of ~2 messages.
    if (scenario.sim.fifo_host == "kernel-pacing") fifo.pacing_burst_bytes = 16384;
    if (scenario.sim.fifo_link_bucket == "tbf") {  // realnet/netns_cluster.cpp's bucket_bytes
      fifo.link_burst_s = 1e-3;
      fifo.link_burst_min_bytes = 16384;
    }
    network_ = std::make_unique<FifoNetwork>(platform.bandwidth_factor, platform.latency_factor,
                                             platform.hosts.begin()->second, fifo);
  }
  for (const auto& link : platform_.links) link_index_.emplace(link.name, link_index_.size());
  link_bytes_.assign(platform_.links.size(), 0);
  if (platform_.has_switch) switch_link_ = link_index("switch");
  int racks = 0;
  for (const auto& [host, rack] : platform_.rack_of) racks = std::max(racks, rack + 1);
  for (int rack = 0; rack < racks; ++rack) {
    rack_up_.push_back(link_index("rack" + std::to_string(rack) + ".up"));
    rack_down_.push_back(link_index("rack" + std::to_string(rack) + ".down"));
  }
}

std::size_t Cluster::link_index(const std::string& name) const {
  const auto it = link_index_.find(name);
  PSTWIN_ASSERT(it != link_index_.end(), "no accounted link " + name);
  return it->second;
}

int Cluster::host_slot(const std::string& name) {
  const auto [it, added] = host_slots_.emplace(name, static_cast<int>(host_links_.size()));
  if (added) {
    HostLinks links;
    links.up = link_index(name + ".up");
    links.down = link_index(name + ".down");
    if (!platform_.rack_of.empty()) links.rack = platform_.rack_of.at(name);
    host_links_.push_back(links);
  }
  return it->second;
}

SharedCores* Cluster::shared_cores(int slot) {
  const auto& cpu = scenario_.cpu;
  if (cpu.shared_cores <= 0) return nullptr;
  const auto index = cpu.core_scope == "machine" ? std::size_t{0} : static_cast<std::size_t>(slot);
  if (shared_cores_.size() <= index) shared_cores_.resize(index + 1);
  auto& cores = shared_cores_[index];
  if (!cores) cores = std::make_unique<SharedCores>(cpu.shared_cores);
  return cores.get();
}

SimNode& Cluster::add_node(std::string label, std::string address, const std::string& host) {
  nodes_.push_back(std::make_unique<SimNode>(*this, std::move(label), address, host));
  by_address_[address] = nodes_.back().get();
  return *nodes_.back();
}

SimNode* Cluster::find(std::string_view address) {
  auto it = by_address_.find(address);
  return it == by_address_.end() ? nullptr : it->second;
}

double Cluster::uplink_rate(const std::string& host) const {
  for (const auto& link : platform_.links)
    if (link.name == host + ".up")
      return link.bandwidth_Bps * platform_.bandwidth_factor / (1 + platform_.cross_traffic);
  return 0;
}

void Cluster::account(const SimNode& from, const SimNode& to, Command command, std::uint64_t bytes,
                      Seconds start, Seconds end) {
  ++messages_;
  message_bytes_ += bytes;
  if (from.host_slot() == to.host_slot()) return;  // loopback: no NIC involved
  cross_host_.add(command, bytes);
  const auto carry = [&](std::size_t link) {
    link_bytes_[link] += bytes;
    timeline_.add(link, start, end, static_cast<double>(bytes));
  };
  const HostLinks& sender = host_links_[static_cast<std::size_t>(from.host_slot())];
  const HostLinks& receiver = host_links_[static_cast<std::size_t>(to.host_slot())];
  carry(sender.up);
  carry(receiver.down);
  if (switch_link_) carry(*switch_link_);
  if (sender.rack != receiver.rack) {
    carry(rack_up_[static_cast<std::size_t>(sender.rack)]);
    carry(rack_down_[static_cast<std::size_t>(receiver.rack)]);
  }
}

void Cluster::dropped(const MessageHeader& header, const SimNode& from, const SimNode& to,
                      std::string_view why) {
  if (fault_counts_.first_drop.empty())
    fault_counts_.first_drop =
        describe_drop(header, from.label(), to.label(), simgrid::s4u::Engine::get_clock(), why);
}

void Cluster::record_span(const SpanView& span, int pid, std::string_view lane) {
  if (span_sink_) span_sink_(span);
  if (!scenario_.output.trace) return;
  if (span.message && !scenario_.output.traces(span.message->key, span.message->iteration)) return;
  if (trace_.size() >= scenario_.output.trace_max_events) {
    ++trace_dropped_;
    return;
  }
  trace_.push_back({std::string(span.process), pid, std::string(lane), std::string(span.category),
                    std::string(span.name), span.start_s, span.end_s,
                    span.message ? std::optional(*span.message) : std::nullopt});
}

void Cluster::fail(const std::string& who, const std::string& text) {
  if (!failure_.empty()) return;
  failure_ = who + ": " + text;
  last_stop_ = simgrid::s4u::Engine::get_clock();
}

void Cluster::fill(RunReport& report, Seconds run_time) const {
  report.links.clear();
  for (const auto& link : platform_.links) {
    const auto bytes = link_bytes_[link_index(link.name)];
    const double utilization =
        run_time > 0 ? static_cast<double>(bytes) / (link.bandwidth_Bps * run_time) : 0;
    LinkUsage usage{link.name, bytes, link.bandwidth_Bps, utilization};
    usage.over_time_width_s = timeline_.width_s();
    const double capacity = link.bandwidth_Bps * usage.over_time_width_s;
    for (const double carried : timeline_.bytes(link_index(link.name)))
      usage.over_time.push_back(capacity > 0 ? carried / capacity : 0);
    report.links.push_back(std::move(usage));
  }
  report.messages = messages_;
  report.message_bytes = message_bytes_;
  report.cross_host = cross_host_;
  report.trace = trace_;
  report.trace_dropped = trace_dropped_;
}

}  // namespace pstwin::sim
