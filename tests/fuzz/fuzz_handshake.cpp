// libFuzzer target: the job-authentication handshake (realnet/job_auth.hpp), what a node reads from
// any connection before it knows who is talking. Each van hands the peer's bytes to the same three
// checks, and the first input byte picks which van's framing the rest is read with:
//   0  accepting side of the epoll van (and the UCX van's proof message): the first 40 bytes the
//      connection sends are its proof of this node's challenge;
//   1  accepting side of the ZeroMQ van: the connection's messages, each a count of frames and the
//      frames, in order; the first must be a single-frame hello, the second a single-frame proof;
//   2  connecting side of every van: the peer's challenge (the epoll van's first 40 bytes, a ZeroMQ
//      frame of any size, the UCX welcome's header after its 8-byte link id), answered with a proof;
//   3  a real proof with the input XORed into it, and a proof under a token taken from the input.
// Whatever the input, nothing but the real proof of this node's challenge under this job's token
// is accepted, and a challenge that is answered is answered with a proof that verifies.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "realnet/job_auth.hpp"

namespace {

using pstwin::realnet::HandshakeBytes;
using pstwin::realnet::JobKey;
using pstwin::realnet::kHandshakeBytes;

void require(bool condition) {
  if (!condition) std::abort();
}

const JobKey& job_key() {
  static const JobKey key("the token of the fuzzed job, 32 chars");
  return key;
}

// This node's challenge: fresh per process (as per connection in the vans); no property below
// depends on its value.
const HandshakeBytes& our_challenge() {
  static const HandshakeBytes challenge = JobKey::challenge();
  return challenge;
}

bool equal(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

const HandshakeBytes& real_proof() {
  static const HandshakeBytes proof = job_key().prove(our_challenge()).value();
  return proof;
}

// The accepting side's verdict on a proof: only the real one passes.
void check_proof(std::span<const std::byte> proof) {
  require(job_key().verify(our_challenge(), proof) == equal(proof, real_proof()));
}

void accept_stream(std::span<const std::byte> bytes) {
  // The van waits for 40 bytes; a connection that closes before is refused without a verdict.
  if (bytes.size() < kHandshakeBytes) return;
  check_proof(bytes.first(kHandshakeBytes));
}

// [frames][size][bytes]... per message; a ROUTER connection gets a challenge for a lone hello, and
// becomes a member only by answering it with a lone proof.
void accept_zmq(std::span<const std::byte> bytes) {
  bool challenged = false;
  while (!bytes.empty()) {
    const std::size_t frames = std::to_integer<std::size_t>(bytes[0]) % 4;
    bytes = bytes.subspan(1);
    std::vector<std::span<const std::byte>> message;
    for (std::size_t f = 0; f < frames && !bytes.empty(); ++f) {
      const std::size_t size = std::min(std::to_integer<std::size_t>(bytes[0]), bytes.size() - 1);
      message.push_back(bytes.subspan(1, size));
      bytes = bytes.subspan(1 + size);
    }
    const bool one_frame = message.size() == 1;
    if (!challenged) {
      challenged = one_frame && pstwin::realnet::is_hello(message.front());
      // A hello is its tag in a frame of the handshake's size; the bytes after the tag ask nothing.
      const auto hello = pstwin::realnet::hello_bytes();
      require(!challenged || (message.front().size() == kHandshakeBytes &&
                              equal(message.front().first(8), std::span(hello).first(8))));
      continue;
    }
    if (one_frame) check_proof(message.front());
    challenged = false;  // an answer, right or wrong, uses the challenge up
  }
}

// The connecting side answers what its peer sent, if it is a challenge at all.
void answer(std::span<const std::byte> challenge) {
  const auto proof = job_key().prove(challenge);
  if (!proof) return;
  require(challenge.size() == kHandshakeBytes);
  require(job_key().verify(challenge, *proof));
  require(!JobKey("another job's token, also 32 chars").verify(challenge, *proof));
  require(equal(*proof, *job_key().prove(challenge)));  // a function of challenge and key only
}

void answer_all(std::span<const std::byte> bytes) {
  answer(bytes);                                                 // a ZeroMQ frame: any size
  answer(bytes.first(std::min(bytes.size(), kHandshakeBytes)));  // the epoll van's 40 bytes
  if (bytes.size() >= 8) answer(bytes.subspan(8));               // a UCX welcome's header
}

void near_misses(std::span<const std::byte> bytes) {
  auto proof = real_proof();
  const std::size_t n = std::min(bytes.size(), proof.size());
  for (std::size_t i = 0; i < n; ++i) proof[i] ^= bytes[i];
  const bool untouched = std::all_of(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n),
                                     [](std::byte b) { return b == std::byte{0}; });
  require(job_key().verify(our_challenge(), proof) == untouched);
  // A token from the input proves nothing to this job unless it is this job's token.
  const std::string_view token(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto other = JobKey(token).prove(our_challenge());
  require(other.has_value());
  require(job_key().verify(our_challenge(), *other) == (token == "the token of the fuzzed job, 32 chars"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto bytes = std::as_bytes(std::span(data + 1, size - 1));
  switch (data[0] % 4) {
    case 0:
      accept_stream(bytes);
      break;
    case 1:
      accept_zmq(bytes);
      break;
    case 2:
      answer_all(bytes);
      break;
    default:
      near_misses(bytes);
      break;
  }
  return 0;
}
