// Assertions for programmer errors: a broken invariant of pstwin's own state (a round completed twice,
// a lane touching a key it does not own). They abort at once, with where and what, and, in the
// simulator, the one-line command that replays the run: a simulated run is a function of its
// scenario and seed, so an assertion that fires there fires again on replay.
// Operating errors (bad input, a peer that misbehaves, a lost connection) are not assertions: they go
// through Runtime::fail or a ScenarioError with a message naming the field, value and fix.
#pragma once

#include <string>
#include <string_view>

namespace pstwin {

// What an assertion prints after its message: e.g. "replay: pstwin sim FILE --seed 7". Set by the
// process that runs a job (the simulator sets it before the first actor starts); empty otherwise.
void set_assertion_context(std::string context);

[[noreturn]] void assertion_failed(std::string_view condition, std::string_view what, const char* file,
                                   int line);

}  // namespace pstwin

// PSTWIN_ASSERT(cond, what): `what` is any expression convertible to std::string_view, evaluated
// only when `cond` is false. Always on, in every build type: these guard state transitions whose
// cost is a comparison, and a release run is where a rare schedule shows up.
#define PSTWIN_ASSERT(cond, what)                                    \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      ::pstwin::assertion_failed(#cond, (what), __FILE__, __LINE__); \
  } while (false)
