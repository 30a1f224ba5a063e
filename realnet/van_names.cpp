// The vans' names and whether this build has each: what a node's environment and the command line
// choose from, apart from the runtimes themselves (van.cpp), so that parsing them needs none.
#include "realnet/van.hpp"

namespace pstwin::realnet {

std::string_view van_name(Van van) {
  switch (van) {
    case Van::kEpoll:
      return "epoll";
    case Van::kUcx:
      return "ucx";
    case Van::kZmq:
      break;
  }
  return "zmq";
}

std::optional<Van> parse_van(std::string_view text) {
  if (text == "zmq") return Van::kZmq;
  if (text == "epoll") return Van::kEpoll;
  if (text == "ucx") return Van::kUcx;
  return std::nullopt;
}

std::string_view van_unavailable(Van van) {
#ifdef PSTWIN_HAVE_UCX
  (void)van;
  return {};
#else
  return van == Van::kUcx
             ? "this pstwin was built without UCX (PSTWIN_UCX=OFF, or pkg-config found no \"ucx\" "
               "module): install libucx-dev (Debian/Ubuntu) and rebuild, or use --van zmq or --van epoll"
             : std::string_view();
#endif
}

std::string encryption_unavailable(Van van) {
  if (van == Van::kZmq) return {};
  return "the " + std::string(van_name(van)) +
         " van cannot encrypt: use the zmq van (DMLC_PS_VAN_TYPE=zmq, pstwin run --van zmq), whose ZeroMQ "
         "CURVE encryption PSTWIN_ENCRYPT=curve turns on, or leave encryption off";
}

}  // namespace pstwin::realnet
