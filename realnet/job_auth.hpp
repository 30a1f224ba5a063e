// Job membership: the job token (PSTWIN_JOB_TOKEN) proves, once per connection, that the process at
// the other end belongs to the job. The accepting side sends a fresh random challenge; the connecting
// side answers with a MAC of it under a key derived from the token (libsodium: crypto_generichash to
// derive, crypto_auth, HMAC-SHA-512-256, to prove, randombytes for the challenge). The token itself
// never crosses the wire, and a recorded answer is worth nothing against the next challenge.
// Every van carries the same bytes: a challenge and a proof of kHandshakeBytes each.
// With PSTWIN_ENCRYPT=curve the token also gives the job's CURVE key pair (JobKey::curve_keys), so
// every member knows the key its peers' ZeroMQ sockets serve with and an outsider does not.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pstwin::realnet {

inline constexpr std::size_t kHandshakeBytes = 40;  // 8 bytes of tag, 32 of nonce or MAC
using HandshakeBytes = std::array<std::byte, kHandshakeBytes>;
// The epoll van's accepting side answers a proof with one of these bytes; the connecting side sends
// its first message only after kProofAccepted.
inline constexpr std::byte kProofAccepted{0x5A};
inline constexpr std::byte kProofRefused{0xA5};

// The shortest token accepted: 16 bytes of text; `pstwin run` makes 64 hex digits (256 bits).
inline constexpr std::size_t kMinTokenBytes = 16;

// A Curve25519 key pair (ZeroMQ CURVE's long-term keys); the secret half is wiped with it.
struct CurveKeyPair {
  static constexpr std::size_t kBytes = 32;
  CurveKeyPair() = default;
  CurveKeyPair(const CurveKeyPair&) = default;
  CurveKeyPair& operator=(const CurveKeyPair&) = default;
  ~CurveKeyPair();
  std::array<unsigned char, kBytes> public_key{};
  std::array<unsigned char, kBytes> secret_key{};
};

class JobKey {
 public:
  // Derives the job's key from `token` (at least kMinTokenBytes; checked by the caller).
  explicit JobKey(std::string_view token);
  ~JobKey();
  JobKey(const JobKey&) = default;
  JobKey& operator=(const JobKey&) = default;

  // A fresh challenge: its tag and 32 random bytes.
  static HandshakeBytes challenge();
  // The answer to `challenge`; nullopt if `challenge` is not one (wrong tag).
  std::optional<HandshakeBytes> prove(std::span<const std::byte> challenge) const;
  // Whether `proof` answers `challenge` under this job's key (constant time).
  bool verify(std::span<const std::byte> challenge, std::span<const std::byte> proof) const;

  // The job's CURVE key pair: every member derives the same one, so each ROUTER serves with it and
  // each DEALER both knows the server's public key and presents the job's own.
  CurveKeyPair curve_keys() const;

  // 32 random bytes as 64 hex digits: a token for one job.
  static std::string random_token();

 private:
  std::array<unsigned char, 32> key_{};
};

// The first message a ZeroMQ DEALER sends: it asks the ROUTER for a challenge.
HandshakeBytes hello_bytes();
bool is_hello(std::span<const std::byte> bytes);

}  // namespace pstwin::realnet
