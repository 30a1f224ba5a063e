#include "ps/scheduler.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "ps/ids.hpp"

namespace pstwin {

Scheduler::Scheduler(Runtime& runtime, SchedulerOptions options, RunObserver& observer,
                     std::unique_ptr<LoadBalancer> balancer)
    : rt_(runtime),
      options_(std::move(options)),
      observer_(observer),
      expected_servers_(options_.servers),
      expected_workers_(options_.workers),
      expected_validators_(options_.validators),
      job_digest_(job_digest(*options_.control.job_fields)),
      next_registrant_id_(kRegistrantIdBase),
      balancer_(std::move(balancer)) {}

void Scheduler::start() {
  rt_.set_self(kSchedulerId);
  rt_.start_timer(options_.control.heartbeat_interval_s, [this] { check_heartbeats(); });
}

void Scheduler::send(NodeId to, Command command, bool response, std::uint64_t key, Payload payload) {
  Message message;
  message.header.recipient = to;
  message.header.command = command;
  message.header.is_response = response;
  message.header.key = key;
  message.payload = std::move(payload);
  rt_.send(std::move(message));
}

void Scheduler::on_message(Message message) {
  const auto& h = message.header;
  if (h.sender != kNoNode) last_seen_[h.sender] = rt_.now();
  if (lost_workers_.contains(h.sender)) {
    // Declared dead but alive (it was stopped or cut off): the job went on without it, so it must end.
    if (fenced_.insert(h.sender).second)
      send(h.sender, Command::kFatal, false, 0,
           encode_text(describe_node(h.sender) +
                       " was declared dead (silent for ps.heartbeat_timeout) and the job went on without it "
                       "(ps.on_worker_loss = \"continue\")"));
    return;
  }
  switch (h.command) {
    case Command::kRegister:
      on_register(message);
      return;
    case Command::kBarrier:
      on_barrier(message);
      return;
    case Command::kHeartbeat:
      // Answered, so a node can tell a dead scheduler from a quiet one (PsNode::heartbeat).
      if (!h.is_response && in_table(h.sender)) send(h.sender, Command::kHeartbeat, true, 0);
      return;
    case Command::kLbReport:
      on_lb_report(message);
      return;
    case Command::kWorkerDone:
      if (lost_workers_.contains(h.sender)) return;
      if (role_of(h.sender) != Role::kWorker || !in_table(h.sender)) {
        rt_.log("scheduler: ignoring worker_done from node " + std::to_string(h.sender) +
                ", which is not a worker of the node table");
        return;
      }
      workers_done_.insert(h.sender);
      maybe_shut_down();
      return;
    case Command::kShutdown:
      if (h.is_response && in_table(h.sender)) {
        shutdown_acks_.insert(h.sender);
        if (shutdown_acks_.size() + lost_workers_.size() == table_.size()) rt_.stop();
      }
      return;
    case Command::kFatal: {
      const std::string text = decode_text(message.payload);
      if (h.sender == kNoNode && table_.empty()) {
        // A node that registered gave up waiting for the node table (its own text names it): the job
        // cannot start as launched.
        fail_job(kNoNode, "a node gave up before the node table was complete: " + text);
        return;
      }
      if (!in_table(h.sender)) {
        rt_.log("scheduler: ignoring a fatal notice from node " + std::to_string(h.sender) +
                ", which is not in the node table: " + text);
        return;
      }
      fail_job(h.sender, describe_node(h.sender) + " failed: " + text);
      return;
    }
    default:
      rt_.log("scheduler: ignoring " + std::string(command_name(h.command)) + " from node " +
              std::to_string(h.sender));
  }
}

void Scheduler::maybe_shut_down() {
  // ps.backup_workers = b: the job is done when all but b workers are; the stragglers need not finish.
  if (shutting_down_ ||
      static_cast<int>(workers_done_.size()) < std::max(1, live_workers() - options_.backup_workers))
    return;
  shutting_down_ = true;
  std::vector<NodeId> everyone;
  for (const auto& info : table_)
    if (!lost_workers_.contains(info.id)) everyone.push_back(info.id);
  broadcast(Command::kShutdown, everyone);
}

std::string Scheduler::describe_node(NodeId id) const {
  for (const auto& info : table_)
    if (info.id == id)
      return std::string(role_name(info.role)) + " " + std::to_string(info.rank) + " (node " +
             std::to_string(id) + " at " + info.address + ")";
  return "node " + std::to_string(id);
}

void Scheduler::fail_job(NodeId culprit, const std::string& text) {
  if (culprit != kNoNode) gone_.insert(culprit);
  relaying_ = true;
  rt_.fail(text);  // on_failing tells everyone else
}

void Scheduler::on_failing(std::string_view why) {
  // A failure of the scheduler's own (a signal, a lost connection) names the scheduler; one it
  // relays already names the node at fault.
  const Payload body = encode_text(relaying_ ? std::string(why)
                                             : "the scheduler (node 1 at " + rt_.local_address() +
                                                   ") failed: " + std::string(why));
  for (const auto& info : table_)
    if (!gone_.contains(info.id) && !shutdown_acks_.contains(info.id))
      send(info.id, Command::kFatal, false, 0, body);
}

void Scheduler::answer_registrant(const NodeInfo& info, std::uint64_t answer, Payload body) {
  const NodeId to = next_registrant_id_++;
  rt_.connect(to, info.address);
  send(to, Command::kRegister, true, answer, std::move(body));
}

void Scheduler::on_register(const Message& message) {
  std::string error;
  auto registration = decode_registration(message.payload, error);
  if (!registration) {
    rt_.log("scheduler: rejecting a malformed registration: " + error);
    return;
  }
  auto* info = &registration->info;
  if (!table_.empty()) {
    rt_.log("scheduler: late registration from " + info->address + " ignored: the node table is complete");
    return;
  }
  // A node configured for another job (another scenario file, --set or DMLC_NUM_*) would fail later
  // in ways far from the cause ("no partition with key 4", a worker waiting forever): refuse it now,
  // naming both digests; it names the fields that differ from the job's fields sent with the refusal.
  if (!registration->job_digest.empty() && registration->job_digest != job_digest_) {
    const std::string reason =
        "its scenario digest " + registration->job_digest + " differs from the job's " + job_digest_;
    rt_.log("scheduler: refused the registration of " + std::string(role_name(info->role)) + " at " +
            info->address + ": " + reason + " (it is told which fields differ); still waiting for " +
            std::to_string(expected_servers_ + expected_workers_ + expected_validators_ -
                           static_cast<int>(registrations_.size())) +
            " node(s)");
    answer_registrant(*info, kRegistrationRefused,
                      encode_refusal({job_digest_, *options_.control.job_fields}));
    return;
  }
  if (registration->job_digest.empty())
    rt_.log("scheduler: " + info->address + " registered without a scenario digest: not checked");
  for (const auto& existing : registrations_) {
    if (existing.address == info->address) return;  // a retry
    if (existing.role == info->role && existing.rank >= 0 && existing.rank == info->rank) {
      rt_.fail("two " + std::string(role_name(info->role)) + "s registered with rank " +
               std::to_string(info->rank) + " (" + existing.address + " and " + info->address +
               "); give each a distinct DMLC_WORKER_ID");
      return;
    }
  }
  if (info->role == Role::kScheduler) {
    rt_.log("scheduler: ignoring registration of unsupported role " + std::string(role_name(info->role)));
    return;
  }
  const int want = info->role == Role::kServer   ? expected_servers_
                   : info->role == Role::kWorker ? expected_workers_
                                                 : expected_validators_;
  if (info->rank >= want || (want == 0 && info->role == Role::kValidator)) {
    const char* variable = info->role == Role::kServer   ? "SERVER"
                           : info->role == Role::kWorker ? "WORKER"
                                                         : "VALIDATOR";
    rt_.fail(std::string(role_name(info->role)) + " at " + info->address + " registered with rank " +
             std::to_string(info->rank) + " but the job has only " + std::to_string(want) + " (DMLC_NUM_" +
             variable + ")");
    return;
  }
  answer_registrant(*info, kRegistrationAccepted);
  registrations_.push_back(std::move(*info));
  if (static_cast<int>(registrations_.size()) == expected_servers_ + expected_workers_ + expected_validators_)
    assign_ids();
}

void Scheduler::assign_ids() {
  // Requested ranks are honoured; the rest are handed out in address order, so the assignment does
  // not depend on which registration arrived first.
  for (Role role : {Role::kServer, Role::kWorker, Role::kValidator}) {
    std::vector<NodeInfo*> nodes;
    std::set<int> taken;
    for (auto& r : registrations_)
      if (r.role == role) {
        nodes.push_back(&r);
        if (r.rank >= 0) taken.insert(r.rank);
      }
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeInfo* a, const NodeInfo* b) { return a->address < b->address; });
    int next = 0;
    for (auto* node : nodes) {
      if (node->rank < 0) {
        while (taken.count(next)) ++next;
        node->rank = next;
        taken.insert(next);
      }
      node->id = role == Role::kServer   ? server_id(node->rank)
                 : role == Role::kWorker ? worker_id(node->rank)
                                         : validator_id(node->rank);
    }
  }
  table_ = registrations_;
  std::sort(table_.begin(), table_.end(), [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  members_.clear();
  for (const auto& info : table_) {
    rt_.connect(info.id, info.address);
    last_seen_[info.id] = rt_.now();
  }
  observer_.node_table(table_, rt_.now());
  if (balancer_)
    for (const auto& [iteration, decision] : balancer_->decisions())
      observer_.lb_decision(kSchedulerId, decision);
  const Payload table = encode_node_table(table_);
  for (const auto& info : table_) send(info.id, Command::kNodeTable, false, 0, table);
}

bool Scheduler::in_table(NodeId id) const {
  return std::ranges::binary_search(table_, id, {}, &NodeInfo::id);
}

const std::vector<NodeId>& Scheduler::members(int group_mask) const {
  auto [it, added] = members_.try_emplace(group_mask);
  if (added)
    for (const auto& info : table_)
      if ((group_of(info.role) & group_mask) && !lost_workers_.contains(info.id))
        it->second.push_back(info.id);
  return it->second;
}

void Scheduler::on_barrier(const Message& message) {
  if (lost_workers_.contains(message.header.sender)) return;
  const int group = static_cast<int>(message.header.key);
  // Counted only from a member: a node of another group (or a forged request) would release it early.
  if (!std::ranges::binary_search(members(group), message.header.sender)) {
    rt_.log("scheduler: ignoring a barrier request of group " + std::to_string(group) + " from node " +
            std::to_string(message.header.sender) + ", which is not a member of it");
    return;
  }
  barrier_arrivals_[group].insert(message.header.sender);
  release_barrier(group);
}

void Scheduler::release_barrier(int group) {
  auto& arrived = barrier_arrivals_[group];
  const auto& expected = members(group);
  if (arrived.empty() || arrived.size() < expected.size()) return;
  arrived.clear();
  observer_.barrier_released(group, rt_.now());
  for (NodeId id : expected) send(id, Command::kBarrier, true, static_cast<std::uint64_t>(group));
}

void Scheduler::on_lb_report(const Message& message) {
  if (!balancer_) {
    rt_.log("scheduler: ignoring a bandwidth report: ps.balancing is not \"lb\"");
    return;
  }
  std::string error;
  auto report = decode_report(message.payload, error);
  std::optional<LbDecision> next;
  if (report) {
    observer_.lb_report(message.header.sender, *report);
    next = balancer_->add_report(message.header.sender, *report, error);
  }
  if (!error.empty()) {
    rt_.fail("scheduler: bad bandwidth report from node " + std::to_string(message.header.sender) + ": " +
             error);
    return;
  }
  if (!next) return;
  observer_.lb_decision(kSchedulerId, *next);
  const Payload body = encode_decision(*next);
  for (NodeId id : members(kServerGroup | kWorkerGroup)) send(id, Command::kLbDecision, false, 0, body);
}

void Scheduler::broadcast(Command command, const std::vector<NodeId>& to) {
  for (NodeId id : to) send(id, command, false, 0);
}

void Scheduler::check_heartbeats() {
  const Seconds now = rt_.now();
  for (const auto& info : table_) {
    // A node that acknowledged the shutdown has stopped and sends nothing more.
    if (shutdown_acks_.contains(info.id)) continue;
    const Seconds silent = now - last_seen_[info.id];
    if (lost_workers_.contains(info.id)) continue;
    if (silent > options_.control.heartbeat_timeout_s) {
      std::ostringstream out;
      out << describe_node(info.id) << " sent no heartbeat for " << std::fixed << std::setprecision(1)
          << silent << " s (ps.heartbeat_timeout = " << std::defaultfloat << std::setprecision(6)
          << options_.control.heartbeat_timeout_s << " s): presumed dead";
      if (info.role == Role::kWorker && options_.continues_on_worker_loss && live_workers() > 1) {
        lose_worker(info, out.str());
        continue;
      }
      fail_job(info.id, out.str());
      return;
    }
  }
  rt_.start_timer(options_.control.heartbeat_interval_s, [this] { check_heartbeats(); });
}

void Scheduler::lose_worker(const NodeInfo& info, const std::string& why) {
  rt_.log(why + "; the job goes on with " + std::to_string(live_workers() - 1) +
          " worker(s) (ps.on_worker_loss = \"continue\")");
  lost_workers_.insert(info.id);
  members_.clear();
  gone_.insert(info.id);
  workers_done_.erase(info.id);
  for (auto& [group, arrived] : barrier_arrivals_) arrived.erase(info.id);
  observer_.worker_lost(info.rank, rt_.now());
  for (const auto& other : table_)
    if (!gone_.contains(other.id) && !shutdown_acks_.contains(other.id))
      send(other.id, Command::kWorkerLost, false, info.id);
  recheck_after_loss();
}

void Scheduler::recheck_after_loss() {
  std::vector<int> groups;
  for (const auto& [group, arrived] : barrier_arrivals_) groups.push_back(group);
  for (int group : groups) release_barrier(group);
  maybe_shut_down();
  if (shutting_down_ && shutdown_acks_.size() + lost_workers_.size() == table_.size()) rt_.stop();
}

std::string Scheduler::describe_state() const {
  std::ostringstream out;
  if (table_.empty())
    out << "waiting for registrations: " << registrations_.size() << " of "
        << expected_servers_ + expected_workers_ + expected_validators_;
  else if (!shutting_down_)
    out << "running; " << workers_done_.size() << " of " << live_workers() << " workers done"
        << (lost_workers_.empty() ? "" : " (" + std::to_string(lost_workers_.size()) + " lost)");
  else
    out << "shutting down; " << shutdown_acks_.size() << " of " << table_.size() << " acks";
  return out.str();
}

}  // namespace pstwin
