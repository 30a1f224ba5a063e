// Interposes the pthread functions that std::thread, std::mutex, std::condition_variable and
// std::this_thread::sleep_for reach (threads.hpp). The executable exports these definitions
// (ENABLE_EXPORTS), so the dynamic linker binds libstdc++'s and the applications' calls to them.
#include "simapp/threads.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/platform.hpp"

namespace s4u = simgrid::s4u;

namespace pstwin::simapp {
namespace {

// The C library's definitions, looked up once, before any thread exists.
template <typename Function>
Function* next_definition(const char* name) {
  void* symbol = dlsym(RTLD_NEXT, name);
  if (!symbol) {
    std::fprintf(stderr, "pstwin-simapp: the C library has no %s\n", name);
    std::abort();
  }
  return reinterpret_cast<Function*>(symbol);
}

struct LibcThreads {
  decltype(&::pthread_create) create = next_definition<decltype(::pthread_create)>("pthread_create");
  decltype(&::pthread_join) join = next_definition<decltype(::pthread_join)>("pthread_join");
  decltype(&::pthread_detach) detach = next_definition<decltype(::pthread_detach)>("pthread_detach");
  decltype(&::pthread_self) self = next_definition<decltype(::pthread_self)>("pthread_self");
  decltype(&::pthread_mutex_lock) lock =
      next_definition<decltype(::pthread_mutex_lock)>("pthread_mutex_lock");
  decltype(&::pthread_mutex_trylock) trylock =
      next_definition<decltype(::pthread_mutex_trylock)>("pthread_mutex_trylock");
  decltype(&::pthread_mutex_unlock) unlock =
      next_definition<decltype(::pthread_mutex_unlock)>("pthread_mutex_unlock");
  decltype(&::pthread_cond_wait) wait = next_definition<decltype(::pthread_cond_wait)>("pthread_cond_wait");
  decltype(&::pthread_cond_timedwait) timedwait =
      next_definition<decltype(::pthread_cond_timedwait)>("pthread_cond_timedwait");
  decltype(&::pthread_cond_clockwait) clockwait =
      next_definition<decltype(::pthread_cond_clockwait)>("pthread_cond_clockwait");
  decltype(&::pthread_cond_signal) signal =
      next_definition<decltype(::pthread_cond_signal)>("pthread_cond_signal");
  decltype(&::pthread_cond_broadcast) broadcast =
      next_definition<decltype(::pthread_cond_broadcast)>("pthread_cond_broadcast");
  decltype(&::nanosleep) sleep = next_definition<decltype(::nanosleep)>("nanosleep");
};

LibcThreads& libc() {
  static LibcThreads functions;
  return functions;
}
// Resolved during static initialisation, while the process has one thread.
[[maybe_unused]] const LibcThreads& resolved_early = libc();

// A mutex or condition variable some actor waits on: a release or signal bumps the generation and
// wakes the waiters, who look again.
struct WaitPoint {
  std::uint64_t generation = 0;
  int waiters = 0;
  s4u::ConditionVariablePtr changed = s4u::ConditionVariable::create();
};

struct ThreadOfProcess {
  pthread_t id;
  int process;
  std::string name;
  const char* waiting = nullptr;  // what the thread is parked on, if it is
};

// One OS thread runs every actor, and actors switch only inside simulator calls: this state needs
// no lock. The maps by address are looked up, never iterated; `threads` is listed in actor order.
struct Simulated {
  bool running = false;
  s4u::MutexPtr wait_mutex;                     // held only between a look and a wait
  std::map<const void*, WaitPoint> points;      // by the mutex's or condition variable's address
  std::map<aid_t, ThreadOfProcess> threads;     // by actor
  std::map<pthread_t, s4u::ActorPtr> joinable;  // threads not joined or detached yet
  std::uint64_t next_thread = 0;
  std::vector<std::string> process_labels;  // by process index
};

Simulated& simulated() {
  static Simulated state;
  return state;
}

bool in_actor() {
  return simulated().running && !s4u::Actor::is_maestro();
}

pthread_t new_thread_id() {
  // Odd: never the address a real pthread_t is.
  return static_cast<pthread_t>((++simulated().next_thread << 1) | 1);
}

bool is_simulated_thread(pthread_t id) {
  return (id & 1) != 0 && simulated().joinable.contains(id);
}

// What the calling actor's thread is parked on, for describe_parked_threads (null: running).
void mark_waiting(const char* what) {
  auto& threads = simulated().threads;
  if (const auto it = threads.find(s4u::this_actor::get_pid()); it != threads.end())
    it->second.waiting = what;
}

// Parks the calling actor until `point` changes after `generation`, or until `deadline` (simulated
// time; negative: none). False: the deadline passed first.
bool park(WaitPoint& point, std::uint64_t generation, double deadline) {
  ++point.waiters;
  bool changed = true;
  {
    std::unique_lock lock(*simulated().wait_mutex);
    if (point.generation == generation) {
      if (deadline < 0)
        point.changed->wait(lock);
      else
        changed = point.changed->wait_until(lock, deadline) == std::cv_status::no_timeout ||
                  point.generation != generation;
    }
  }
  --point.waiters;
  return changed;
}

// A release or signal. The generation moves even with no actor parked yet: one that read it before
// and parks after (its unlock let others run in between) sees the change instead of sleeping on.
void wake(const void* address) {
  auto& points = simulated().points;
  const auto it = points.find(address);
  if (it == points.end()) return;
  ++it->second.generation;
  if (it->second.waiters > 0) it->second.changed->notify_all();
}

int lock_in_actor(pthread_mutex_t* mutex) {
  for (;;) {
    if (const int status = libc().trylock(mutex); status != EBUSY) return status;
    // Making the wait point is a simulator call, during which the holder may release the mutex: try
    // again once it exists, then park before anything else can run.
    WaitPoint& point = simulated().points[mutex];
    const std::uint64_t generation = point.generation;
    if (const int status = libc().trylock(mutex); status != EBUSY) return status;
    mark_waiting("waits for a mutex");
    park(point, generation, -1);
    mark_waiting(nullptr);
  }
}

int unlock_in_actor(pthread_mutex_t* mutex) {
  const int status = libc().unlock(mutex);
  wake(mutex);
  return status;
}

// A timed wait's deadline on `clock`, as simulated time: the real time left, to the millisecond.
double simulated_deadline(clockid_t clock, const timespec* deadline) {
  timespec now{};
  clock_gettime(clock, &now);
  const double left = static_cast<double>(deadline->tv_sec - now.tv_sec) +
                      static_cast<double>(deadline->tv_nsec - now.tv_nsec) * 1e-9;
  return s4u::Engine::get_clock() + std::max(0.0, std::round(left * 1e3) * 1e-3);
}

int wait_in_actor(pthread_cond_t* condition, pthread_mutex_t* mutex, double deadline) {
  WaitPoint& point = simulated().points[condition];
  const std::uint64_t generation = point.generation;
  unlock_in_actor(mutex);
  mark_waiting(deadline < 0 ? "waits on a condition variable"
                            : "waits on a condition variable, with a timeout");
  const bool signalled = park(point, generation, deadline);
  mark_waiting(nullptr);
  lock_in_actor(mutex);
  return signalled ? 0 : ETIMEDOUT;
}

}  // namespace

void start_simulated_threads(std::vector<std::string> process_labels) {
  simulated().process_labels = std::move(process_labels);
  simulated().wait_mutex = s4u::Mutex::create();
  simulated().running = true;
}

void stop_simulated_threads() {
  simulated().running = false;
}

void adopt_current_actor(int process) {
  simulated().threads[s4u::this_actor::get_pid()] = {new_thread_id(), process, s4u::this_actor::get_name()};
}

std::vector<ParkedThread> describe_parked_threads() {
  std::vector<ParkedThread> parked;
  for (const auto& [actor, thread] : simulated().threads)  // by actor id: creation order
    if (thread.waiting) parked.push_back({thread.process, thread.name + ": " + thread.waiting});
  return parked;
}

int current_process() {
  if (!in_actor()) return -1;
  const auto it = simulated().threads.find(s4u::this_actor::get_pid());
  return it == simulated().threads.end() ? -1 : it->second.process;
}

}  // namespace pstwin::simapp

using pstwin::simapp::in_actor;
using pstwin::simapp::libc;
using pstwin::simapp::simulated;

extern "C" {

int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*routine)(void*),
                   void* argument) noexcept {
  if (!in_actor()) return libc().create(thread, attributes, routine, argument);
  const int process = pstwin::simapp::current_process();
  const pthread_t id = pstwin::simapp::new_thread_id();
  auto& state = simulated();
  const std::string name = state.process_labels.at(static_cast<std::size_t>(process)) + " thread " +
                           std::to_string(state.next_thread);
  state.joinable[id] =
      pstwin::sim::create_actor(name, s4u::this_actor::get_host(), [id, process, name, routine, argument] {
        auto& threads = simulated().threads;
        threads[s4u::this_actor::get_pid()] = {id, process, name};
        routine(argument);
        threads.erase(s4u::this_actor::get_pid());
      });
  *thread = id;
  return 0;
}

int pthread_join(pthread_t thread, void** result) {
  if (!pstwin::simapp::is_simulated_thread(thread)) {
    // A simulated thread's id that is joined or detached already: never the C library's to look up.
    if ((thread & 1) != 0 && simulated().running) return ESRCH;
    return libc().join(thread, result);
  }
  const s4u::ActorPtr actor = simulated().joinable.at(thread);
  simulated().joinable.erase(thread);
  pstwin::simapp::mark_waiting("waits for a thread to end (join)");
  actor->join();
  pstwin::simapp::mark_waiting(nullptr);
  if (result) *result = nullptr;
  return 0;
}

int pthread_detach(pthread_t thread) noexcept {
  if (!pstwin::simapp::is_simulated_thread(thread)) {
    if ((thread & 1) != 0 && simulated().running) return ESRCH;
    return libc().detach(thread);
  }
  simulated().joinable.erase(thread);
  return 0;
}

pthread_t pthread_self() noexcept {
  if (in_actor()) {
    const auto it = simulated().threads.find(s4u::this_actor::get_pid());
    if (it != simulated().threads.end()) return it->second.id;
  }
  return libc().self();
}

int pthread_mutex_lock(pthread_mutex_t* mutex) noexcept {
  return in_actor() ? pstwin::simapp::lock_in_actor(mutex) : libc().lock(mutex);
}

int pthread_mutex_unlock(pthread_mutex_t* mutex) noexcept {
  return in_actor() ? pstwin::simapp::unlock_in_actor(mutex) : libc().unlock(mutex);
}

int pthread_cond_wait(pthread_cond_t* condition, pthread_mutex_t* mutex) {
  return in_actor() ? pstwin::simapp::wait_in_actor(condition, mutex, -1) : libc().wait(condition, mutex);
}

int pthread_cond_timedwait(pthread_cond_t* condition, pthread_mutex_t* mutex, const timespec* deadline) {
  if (!in_actor()) return libc().timedwait(condition, mutex, deadline);
  return pstwin::simapp::wait_in_actor(condition, mutex,
                                       pstwin::simapp::simulated_deadline(CLOCK_REALTIME, deadline));
}

int pthread_cond_clockwait(pthread_cond_t* condition, pthread_mutex_t* mutex, clockid_t clock,
                           const timespec* deadline) {
  if (!in_actor()) return libc().clockwait(condition, mutex, clock, deadline);
  return pstwin::simapp::wait_in_actor(condition, mutex, pstwin::simapp::simulated_deadline(clock, deadline));
}

int pthread_cond_signal(pthread_cond_t* condition) noexcept {
  if (in_actor()) pstwin::simapp::wake(condition);
  return libc().signal(condition);
}

int pthread_cond_broadcast(pthread_cond_t* condition) noexcept {
  if (in_actor()) pstwin::simapp::wake(condition);
  return libc().broadcast(condition);
}

int nanosleep(const timespec* duration, timespec* remaining) {
  if (!in_actor()) return libc().sleep(duration, remaining);
  pstwin::simapp::mark_waiting("sleeps");
  s4u::this_actor::sleep_for(static_cast<double>(duration->tv_sec) +
                             static_cast<double>(duration->tv_nsec) * 1e-9);
  pstwin::simapp::mark_waiting(nullptr);
  if (remaining) *remaining = {};
  return 0;
}

}  // extern "C"
