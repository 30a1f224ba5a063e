// SimGrid's own floor for pstwin's simulator: pairs of actors hand a turn back and forth through an
// s4u mutex and condition variable, the way a node's event loop is woken for each event it is
// posted. No pstwin code runs, so CPU time per hand-off here is what one wake-up of a node's loop
// costs at least. With MODE "suspend" the waiting side suspends itself and the other resumes it, as
// an executor lane is parked (sim/cluster.hpp): the same two simcalls per hand-off.
// Usage: bench_s4u_handoff [PAIRS] [ROUNDS] [MODE] (default 1024 500 cond).
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <simgrid/s4u.hpp>

namespace s4u = simgrid::s4u;

namespace {
struct Pair {
  s4u::MutexPtr mutex = s4u::Mutex::create();
  s4u::ConditionVariablePtr turned = s4u::ConditionVariable::create();
  std::array<s4u::ActorPtr, 2> side;
  int turn = 0;
};

int positive(const char* text, const char* what) {
  const int value = std::atoi(text);
  if (value <= 0) {
    std::fprintf(stderr, "bench_s4u_handoff: %s must be a positive integer, got \"%s\"\n", what, text);
    std::exit(2);
  }
  return value;
}
}  // namespace

int main(int argc, char** argv) {
  s4u::Engine engine(&argc, argv);
  const int pairs = argc > 1 ? positive(argv[1], "PAIRS") : 1024;
  const int rounds = argc > 2 ? positive(argv[2], "ROUNDS") : 500;
  const std::string mode = argc > 3 ? argv[3] : "cond";
  if (mode != "cond" && mode != "suspend") {
    std::fprintf(stderr, "bench_s4u_handoff: MODE must be \"cond\" or \"suspend\", got \"%s\"\n",
                 mode.c_str());
    return 2;
  }
  const bool suspend = mode == "suspend";
  auto* zone = s4u::create_star_zone("zone");
  auto* host = zone->create_host("host", 1e9)->seal();
  zone->seal();
  std::vector<Pair> all(static_cast<std::size_t>(pairs));
  for (auto& pair : all)
    for (int side = 0; side < 2; ++side)
      pair.side[static_cast<std::size_t>(side)] =
          s4u::Actor::create("side", host, [&pair, side, rounds, suspend] {
            // A suspended side holds no lock: the mutex is the condition variable's only.
            std::unique_lock lock(*pair.mutex, std::defer_lock);
            if (!suspend) lock.lock();
            for (int round = 0; round < rounds; ++round) {
              while (pair.turn != side) {
                if (suspend)
                  s4u::this_actor::suspend();
                else
                  pair.turned->wait(lock);
              }
              pair.turn = 1 - side;
              if (suspend)
                pair.side[static_cast<std::size_t>(1 - side)]->resume();
              else
                pair.turned->notify_one();
              // Simulated time moves too, as in a run: every eighth round sleeps a microsecond.
              if (side == 0 && round % 8 == 0) s4u::this_actor::sleep_for(1e-6);
            }
          });
  const auto start = std::chrono::steady_clock::now();
  engine.run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double handoffs = 2.0 * pairs * rounds;
  std::printf("%d pairs x %d rounds (%s): %.0f hand-offs in %.3f s wall, %.3f us wall per hand-off\n", pairs,
              rounds, mode.c_str(), handoffs, wall, 1e6 * wall / handoffs);
  return 0;
}
