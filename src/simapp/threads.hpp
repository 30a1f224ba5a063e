// The threads of simulated ps-lite processes are SimGrid actors. An application and the ps-lite API
// under it use std::thread, std::mutex, std::condition_variable and sleeps as on a real machine;
// while a simulation runs, pstwin-simapp's own definitions of the pthread functions below those
// (threads.cpp) make every call from an actor the simulator's: a new thread is an actor on the same
// host, a contended lock or a wait parks the actor until another one releases or signals, a sleep
// takes simulated time. Calls from outside an actor, or with no simulation running, go to the C
// library. So a blocking call parks one simulated thread instead of the whole simulator, and every
// interleaving is the simulator's, hence reproducible.
//
// Limits: a recursive mutex held by one actor is taken at once by another (all actors are one OS
// thread); timeouts of condition-variable waits are converted to simulated time from the real clock
// at the call, rounded to the millisecond.
#pragma once

#include <string>
#include <vector>

namespace pstwin::simapp {

// Between these, calls from actors are simulated (call both from the engine's thread, outside actors).
// `process_labels` name the simulated processes, by index, in thread names ("worker 0 thread 3").
void start_simulated_threads(std::vector<std::string> process_labels);
void stop_simulated_threads();

// The calling actor runs simulated process `process` (its main or a thread it started).
void adopt_current_actor(int process);
// The simulated process of the calling actor's thread; -1: none (a node's actor, or no actor).
int current_process();

// The simulated threads parked now (a stuck run), each with its process and what it waits for.
struct ParkedThread {
  int process;
  std::string what;  // "thread 3: waits on a condition variable"
};
std::vector<ParkedThread> describe_parked_threads();

}  // namespace pstwin::simapp
