#include "realnet/job_auth.hpp"

#include <sodium.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <stdexcept>

namespace pstwin::realnet {

namespace {

constexpr std::size_t kTagBytes = 8;
constexpr std::string_view kChallengeTag = "PSTWCHAL";
constexpr std::string_view kProofTag = "PSTWPROF";
constexpr std::string_view kHelloTag = "PSTWHELO";
// Domain separation: a key or MAC made for this purpose means nothing anywhere else.
constexpr std::string_view kKeyContext = "pstwin job key v1";
constexpr std::string_view kProofContext = "pstwin membership proof v1";
// crypto_kdf's context: exactly crypto_kdf_CONTEXTBYTES characters.
constexpr std::string_view kCurveContext = "pstwcurv";

void init_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw std::runtime_error("libsodium could not be initialised (sodium_init failed)");
}

bool has_tag(std::span<const std::byte> bytes, std::string_view tag) {
  return bytes.size() == kHandshakeBytes && std::memcmp(bytes.data(), tag.data(), kTagBytes) == 0;
}

HandshakeBytes tagged(std::string_view tag) {
  HandshakeBytes out{};
  std::memcpy(out.data(), tag.data(), kTagBytes);
  return out;
}

}  // namespace

static_assert(crypto_auth_BYTES == kHandshakeBytes - kTagBytes);
static_assert(crypto_auth_KEYBYTES == 32);
static_assert(kCurveContext.size() == crypto_kdf_CONTEXTBYTES);
static_assert(crypto_kdf_KEYBYTES == 32);
static_assert(crypto_scalarmult_BYTES == CurveKeyPair::kBytes);
static_assert(crypto_scalarmult_SCALARBYTES == CurveKeyPair::kBytes);

CurveKeyPair::~CurveKeyPair() {
  sodium_memzero(secret_key.data(), secret_key.size());
}

JobKey::JobKey(std::string_view token) {
  init_sodium();
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, key_.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(kKeyContext.data()),
                            kKeyContext.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(token.data()), token.size());
  crypto_generichash_final(&state, key_.data(), key_.size());
}

JobKey::~JobKey() {
  sodium_memzero(key_.data(), key_.size());
}

HandshakeBytes JobKey::challenge() {
  init_sodium();
  HandshakeBytes out = tagged(kChallengeTag);
  randombytes_buf(out.data() + kTagBytes, kHandshakeBytes - kTagBytes);
  return out;
}

std::optional<HandshakeBytes> JobKey::prove(std::span<const std::byte> challenge) const {
  if (!has_tag(challenge, kChallengeTag)) return std::nullopt;
  std::array<unsigned char, kProofContext.size() + kHandshakeBytes - kTagBytes> input{};
  std::memcpy(input.data(), kProofContext.data(), kProofContext.size());
  std::memcpy(input.data() + kProofContext.size(), challenge.data() + kTagBytes, kHandshakeBytes - kTagBytes);
  HandshakeBytes out = tagged(kProofTag);
  crypto_auth(reinterpret_cast<unsigned char*>(out.data()) + kTagBytes, input.data(), input.size(),
              key_.data());
  return out;
}

bool JobKey::verify(std::span<const std::byte> challenge, std::span<const std::byte> proof) const {
  if (!has_tag(proof, kProofTag)) return false;
  const auto expected = prove(challenge);
  if (!expected) return false;
  return sodium_memcmp(expected->data() + kTagBytes, proof.data() + kTagBytes, kHandshakeBytes - kTagBytes) ==
         0;
}

// The secret is a subkey of the job key (so it says nothing about the MAC key, nor that about it);
// the public key is its Curve25519 base-point multiple, as zmq_curve_public computes it.
CurveKeyPair JobKey::curve_keys() const {
  CurveKeyPair keys;
  crypto_kdf_derive_from_key(keys.secret_key.data(), keys.secret_key.size(), 1, kCurveContext.data(),
                             key_.data());
  if (crypto_scalarmult_base(keys.public_key.data(), keys.secret_key.data()) != 0)
    throw std::runtime_error("libsodium could not derive the job's CURVE public key");
  return keys;
}

std::string JobKey::random_token() {
  init_sodium();
  std::array<unsigned char, 32> bytes{};
  randombytes_buf(bytes.data(), bytes.size());
  std::string hex(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), bytes.data(), bytes.size());
  hex.pop_back();
  return hex;
}

HandshakeBytes hello_bytes() {
  return tagged(kHelloTag);
}

bool is_hello(std::span<const std::byte> bytes) {
  return has_tag(bytes, kHelloTag);
}

}  // namespace pstwin::realnet
