// What a robust rule on the servers (zeno.rule without validators) made of one worker's gradient for
// one key and round: reported to the observers, counted in results.json's `selection`.
#pragma once

#include <string_view>

namespace pstwin {

struct CandidateJudgement {
  int worker = -1;
  bool accepted = true;  // in the update at all
  // Its weight in the update times the number of gradients: 1 is an equal share of a mean; Krum's
  // chosen one has n and the others 0, a clipped or trimmed one less than 1.
  double share = 1;
  std::string_view verdict = "accepted";  // a static name: accepted, dropped, reversed, non_finite, ...
};

}  // namespace pstwin
