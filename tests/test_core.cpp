#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/assert.hpp"
#include "core/digest.hpp"
#include "core/edit_distance.hpp"
#include "core/float_sum.hpp"
#include "core/payload.hpp"
#include "core/random.hpp"

namespace pstwin {
namespace {

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s));
}

std::shared_ptr<ByteBuffer> filled_buffer(std::size_t size) {
  auto buffer = std::make_shared<ByteBuffer>(size);
  for (std::size_t i = 0; i < size; ++i) buffer->data()[i] = static_cast<std::byte>(i * 7 + 1);
  return buffer;
}

// ---------------------------------------------------------------- Assertions

TEST(AssertionDeathTest, AbortsNamingWhereWhatAndTheReplay) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        set_assertion_context("replay: pstwin sim scenarios/quickstart.toml --seed 7");
        const int completed_rounds = 2;
        PSTWIN_ASSERT(completed_rounds == 1, "key 65536 round 3 completed twice");
      },
      "assertion failed at .*test_core.cpp:[0-9]+: completed_rounds == 1: key 65536 round 3 completed "
      "twice\n  replay: pstwin sim scenarios/quickstart.toml --seed 7");
}

TEST(Assertion, HoldsSilentlyAndEvaluatesItsMessageOnlyOnFailure) {
  int evaluated = 0;
  auto message = [&] {
    ++evaluated;
    return std::string("never");
  };
  PSTWIN_ASSERT(evaluated == 0, message());
  EXPECT_EQ(evaluated, 0);
}

// ---------------------------------------------------------------- Payload

TEST(EditDistance, CountsEditsAndAdjacentTranspositions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("DMLC_ROLE", "DMLC_ROLE"), 0u);
  EXPECT_EQ(edit_distance("DMLC_PS_VAN_TYP", "DMLC_PS_VAN_TYPE"), 1u);         // an insertion
  EXPECT_EQ(edit_distance("BYTEPS_ENALBE_ASYNC", "BYTEPS_ENABLE_ASYNC"), 1u);  // a transposition
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
}

TEST(EditDistance, StopsPastItsLimitWithAValueAboveIt) {
  const std::string far(100000, 'x');  // a name as long as an environment allows: stops within rows
  EXPECT_GT(edit_distance(far, "DMLC_PS_VAN_TYPE", 2), 2u);
  EXPECT_GT(edit_distance("PSTWIN_JOB_TOKEN", "DMLC_PS_ROOT_URI", 2), 2u);
  // Within the limit the distance is exact.
  EXPECT_EQ(edit_distance("DMLC_PS_VAN_TYP", "DMLC_PS_VAN_TYPE", 2), 1u);
  EXPECT_EQ(edit_distance("BYTEPS_ENALBE_ASYNC", "BYTEPS_ENABLE_ASYNC", 2), 1u);
  EXPECT_EQ(edit_distance("abXcd", "abcd", 1), 1u);
}

TEST(Payload, BufferIsAlignedAndZeroed) {
  for (std::size_t size : {0, 1, 63, 64, 65, 4096 + 3}) {
    ByteBuffer buffer(size);
    EXPECT_EQ(buffer.size(), size);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64, 0u) << size;
    for (std::byte b : buffer.bytes()) EXPECT_EQ(b, std::byte{0});
  }
}

TEST(Payload, BufferForOverwriteZeroesWhatFloatsDoNotCover) {
  for (std::size_t size : {0, 3, 4, 4096 + 3}) {
    ByteBuffer buffer(size, ByteBuffer::ForOverwrite{});
    EXPECT_EQ(buffer.size(), size);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64, 0u) << size;
    std::ranges::fill(buffer.floats(), 1.0f);
    // The bytes past the last whole float are zero: a digest of the buffer is deterministic.
    for (std::size_t i = buffer.floats().size() * sizeof(float); i < size; ++i)
      EXPECT_EQ(buffer.bytes()[i], std::byte{0}) << size << " at " << i;
  }
}

TEST(Payload, DefaultIsEmptyReal) {
  Payload p;
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(p.is_phantom());
  EXPECT_FALSE(p.is_live());
  EXPECT_TRUE(p.bytes().empty());
  EXPECT_TRUE(p.floats().empty());
}

TEST(Payload, CopyOfOwnsItsBytes) {
  std::string source = "parameter server";
  Payload p = Payload::copy_of(as_bytes(source));
  source[0] = 'X';
  ASSERT_EQ(p.size(), 16u);
  EXPECT_EQ(std::memcmp(p.bytes().data(), "parameter server", 16), 0);
}

TEST(Payload, SlicesShareStorage) {
  auto buffer = filled_buffer(1024);
  const Payload whole = Payload::adopt(buffer);
  EXPECT_EQ(whole.bytes().data(), buffer->data());  // adopt is zero-copy

  const Payload mid = whole.slice(100, 200);
  EXPECT_EQ(mid.size(), 200u);
  EXPECT_EQ(mid.bytes().data(), buffer->data() + 100);

  const Payload nested = mid.slice(50, 10);  // offsets compose
  EXPECT_EQ(nested.bytes().data(), buffer->data() + 150);
  EXPECT_EQ(nested.bytes()[0], buffer->data()[150]);

  EXPECT_EQ(whole.slice(1024, 0).size(), 0u);  // empty slice at the very end is legal
  EXPECT_EQ(whole.slice(0, 1024).bytes().data(), buffer->data());

  // The slice keeps the storage alive after every other owner is gone.
  const std::byte expected = buffer->data()[150];
  Payload survivor = nested;
  buffer.reset();
  EXPECT_EQ(survivor.bytes()[0], expected);
}

TEST(Payload, SliceOutOfRangeThrowsWithDetails) {
  const Payload p = Payload::adopt(filled_buffer(100));
  EXPECT_THROW((void)p.slice(101, 0), std::out_of_range);
  EXPECT_THROW((void)p.slice(50, 51), std::out_of_range);
  EXPECT_THROW((void)p.slice(1, UINT64_MAX), std::out_of_range);  // offset + length would wrap
  EXPECT_THROW((void)p.slice(UINT64_MAX, 2), std::out_of_range);
  try {
    (void)p.slice(90, 20);
    FAIL() << "slice did not throw";
  } catch (const std::out_of_range& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("90"), std::string::npos) << what;
    EXPECT_NE(what.find("20"), std::string::npos) << what;
    EXPECT_NE(what.find("100"), std::string::npos) << what;
  }
}

TEST(Payload, FloatsView) {
  auto buffer = std::make_shared<ByteBuffer>(16 * sizeof(float));
  for (std::size_t i = 0; i < 16; ++i) buffer->floats()[i] = static_cast<float>(i) * 0.5f;
  const Payload p = Payload::adopt(buffer);
  ASSERT_EQ(p.floats().size(), 16u);
  EXPECT_EQ(p.floats()[3], 1.5f);
  const Payload s = p.slice(4 * sizeof(float), 8 * sizeof(float));
  ASSERT_EQ(s.floats().size(), 8u);
  EXPECT_EQ(s.floats()[0], 2.0f);
  EXPECT_THROW((void)p.slice(1, 8).floats(), std::logic_error);  // misaligned
  EXPECT_THROW((void)p.slice(0, 6).floats(), std::logic_error);  // not whole floats
}

TEST(Payload, LiveViewReadsCurrentBytesUntilFrozen) {
  auto region = filled_buffer(64);
  const Payload live = Payload::live_view(region);
  EXPECT_TRUE(live.is_live());
  EXPECT_EQ(live.size(), 64u);

  region->data()[0] = std::byte{0xAA};  // a write before freezing is part of the snapshot
  const Payload snapshot = live.frozen();
  EXPECT_FALSE(snapshot.is_live());
  EXPECT_FALSE(snapshot.is_phantom());
  EXPECT_NE(snapshot.bytes().data(), region->data());  // an owned copy
  EXPECT_EQ(snapshot.bytes()[0], std::byte{0xAA});

  region->data()[0] = std::byte{0x55};  // a write after freezing is not
  region->data()[63] = std::byte{0x66};
  EXPECT_EQ(snapshot.bytes()[0], std::byte{0xAA});
  EXPECT_EQ(snapshot.bytes()[63], static_cast<std::byte>(63 * 7 + 1));
  EXPECT_EQ(live.bytes()[0], std::byte{0x55});  // the view itself still follows the region

  // Freezing a slice of a live view copies only that slice.
  const Payload part = live.slice(60, 4);
  EXPECT_TRUE(part.is_live());
  const Payload frozen_part = part.frozen();
  EXPECT_EQ(frozen_part.size(), 4u);
  EXPECT_EQ(frozen_part.bytes()[3], std::byte{0x66});
}

TEST(Payload, FrozenOfNonLiveIsIdentity) {
  const Payload real = Payload::adopt(filled_buffer(32));
  EXPECT_EQ(real.frozen().bytes().data(), real.bytes().data());
  const Payload phantom = Payload::phantom(1 << 20);
  EXPECT_TRUE(phantom.frozen().is_phantom());
  EXPECT_EQ(phantom.frozen().size(), 1u << 20);
}

TEST(Payload, SoleBufferIsHandedOverOnlyWhenNothingElseSharesIt) {
  Payload whole = Payload::adopt(filled_buffer(64));
  const std::byte* data = whole.bytes().data();
  {
    const Payload other = whole;  // shared: copying is the only safe choice
    EXPECT_EQ(whole.take_sole_buffer(), nullptr);
    EXPECT_EQ(whole.bytes().data(), data);
  }
  Payload slice = whole.slice(0, 32);
  EXPECT_EQ(slice.take_sole_buffer(), nullptr);  // shared with `whole`, and not all of it
  slice = Payload{};
  const auto buffer = whole.take_sole_buffer();
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(buffer->data(), data);
  EXPECT_EQ(buffer->size(), 64u);
  EXPECT_TRUE(whole.empty());
  Payload part = Payload::adopt(filled_buffer(64)).slice(16, 32);  // sole owner, but a part
  EXPECT_EQ(part.take_sole_buffer(), nullptr);
  Payload phantom = Payload::phantom(64);
  EXPECT_EQ(phantom.take_sole_buffer(), nullptr);
  auto region = std::make_shared<ByteBuffer>(64);
  Payload live = Payload::live_view(region);
  region.reset();
  EXPECT_EQ(live.take_sole_buffer(), nullptr);  // a live view is never the receiver's to overwrite
}

TEST(Payload, PhantomHasSizeButNoBytes) {
  const Payload p = Payload::phantom(std::uint64_t{1} << 40);  // far more than could be allocated
  EXPECT_TRUE(p.is_phantom());
  EXPECT_EQ(p.size(), std::uint64_t{1} << 40);
  EXPECT_THROW((void)p.bytes(), std::logic_error);
  EXPECT_THROW((void)p.floats(), std::logic_error);
  const Payload s = p.slice(1000, 24);
  EXPECT_TRUE(s.is_phantom());
  EXPECT_EQ(s.size(), 24u);
  EXPECT_THROW((void)p.slice(std::uint64_t{1} << 40, 1), std::out_of_range);
  EXPECT_TRUE(Payload::phantom(0).empty());
}

// ---------------------------------------------------------------- Random

TEST(Random, SameSeedAndPurposeReproduce) {
  RandomStream a(42, "loss");
  RandomStream b(42, "loss");
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next_u64(), b.next_u64()) << i;
  RandomStream c(42, "loss", 7);
  RandomStream d(42, "loss", 7);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(c.uniform01(), d.uniform01());
    ASSERT_EQ(c.normal(1, 2), d.normal(1, 2));
    ASSERT_EQ(c.below(13), d.below(13));
  }
}

TEST(Random, DifferentInputsGiveDifferentStreams) {
  auto first = [](std::uint64_t seed, std::string_view purpose, std::uint64_t salt) {
    RandomStream r(seed, purpose, salt);
    return std::vector<std::uint64_t>{r.next_u64(), r.next_u64(), r.next_u64()};
  };
  const auto base = first(42, "loss", 0);
  EXPECT_NE(base, first(42, "jitter", 0));
  EXPECT_NE(base, first(43, "loss", 0));
  EXPECT_NE(base, first(42, "loss", 1));
  EXPECT_NE(first(1, "x", 2), first(2, "x", 1));  // seed and salt are not interchangeable
}

TEST(Random, KnownAnswerPinsTheAlgorithm) {
  // Guards the documented derivation in random.cpp: a change here shifts every scenario's numbers.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  // Expected values come from an independent (Python) implementation of that definition.
  RandomStream r(0, "");
  EXPECT_EQ(r.next_u64(), 0xebd8142281f90a65ULL);
  EXPECT_EQ(r.next_u64(), 0xb07e54495a98eb34ULL);
  EXPECT_EQ(r.next_u64(), 0xe8f0cbbbfd991d37ULL);
  RandomStream s(42, "loss", 7);
  EXPECT_EQ(s.next_u64(), 0x6677c8b29a9447f2ULL);
  EXPECT_EQ(s.next_u64(), 0x9bee3057c8bbd78fULL);
  EXPECT_EQ(s.next_u64(), 0x8bd791381503a2b9ULL);
  RandomStream u(42, "loss", 7);
  EXPECT_EQ(u.uniform01(), static_cast<double>(0x6677c8b29a9447f2ULL >> 11) * 0x1.0p-53);
}

TEST(Random, Uniform01InRangeWithMeanHalf) {
  RandomStream r(2024, "uniform");
  constexpr int kDraws = 100000;
  double sum = 0;
  double lo = 1, hi = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double u = r.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.005);  // stddev of the mean is ~0.0009
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
}

TEST(Random, UniformRespectsBounds) {
  RandomStream r(5, "uniform-range");
  for (int i = 0; i < 10000; ++i) {
    const double x = r.uniform(-3.0, 7.5);
    ASSERT_GE(x, -3.0);
    ASSERT_LT(x, 7.5);
  }
  EXPECT_EQ(r.uniform(2.0, 2.0), 2.0);
}

TEST(Random, BelowBoundsAndCoverage) {
  RandomStream r(7, "below");
  EXPECT_THROW((void)r.below(0), std::invalid_argument);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(r.below(1), 0u);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t v = r.below(10);
    ASSERT_LT(v, 10u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 600);
  // A bound just above 2^63 rejects almost half the draws; it must still terminate and stay in range.
  const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 1000; ++i) ASSERT_LT(r.below(big), big);
  for (int i = 0; i < 1000; ++i) ASSERT_LT(r.below(UINT64_MAX), UINT64_MAX);
}

TEST(Random, NormalMoments) {
  RandomStream r(11, "normal");
  constexpr int kDraws = 100000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = r.normal(3.0, 2.0);
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
  }
  const double mean = sum / kDraws;
  const double var = sum_sq / kDraws - mean * mean;
  EXPECT_NEAR(mean, 3.0, 0.03);
  EXPECT_NEAR(var, 4.0, 0.1);
}

// ---------------------------------------------------------------- FloatSum

TEST(FloatSum, MatchesScalarReferenceOnOddSizes) {
  RandomStream r(99, "float-sum");
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000003}}) {
    std::vector<float> dst(n), src(n);
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = static_cast<float>(r.uniform(-100, 100));
      src[i] = static_cast<float>(r.uniform(-100, 100));
    }
    std::vector<float> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = dst[i] + src[i];  // exact same IEEE op per element
    sum_into(dst, src);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], expected[i]) << "n=" << n << " i=" << i;
  }
}

TEST(FloatSum, UnalignedSubspansAndAliasing) {
  std::vector<float> dst(1031, 1.0f), src(1031, 2.0f);
  sum_into(std::span(dst).subspan(1, 1029), std::span<const float>(src).subspan(2, 1029));
  EXPECT_EQ(dst[0], 1.0f);
  EXPECT_EQ(dst[1], 3.0f);
  EXPECT_EQ(dst[1029], 3.0f);
  EXPECT_EQ(dst[1030], 1.0f);
  sum_into(dst, dst);  // doubling in place
  EXPECT_EQ(dst[0], 2.0f);
  EXPECT_EQ(dst[5], 6.0f);
}

TEST(FloatSum, SizeMismatchThrows) {
  std::vector<float> a(8), b(9);
  EXPECT_THROW(sum_into(a, b), std::invalid_argument);
  EXPECT_THROW(sum_into(std::span<float>(a).first(0), b), std::invalid_argument);
}

// ---------------------------------------------------------------- Digest

TEST(Digest, KnownAnswers) {
  // Values from the definition in digest.hpp, computed by an independent implementation.
  EXPECT_EQ(Digest{}.hex(), "b8371b5e9326a9e3");
  EXPECT_EQ(hex_digest({}), "b8371b5e9326a9e3");
  EXPECT_EQ(hex_digest(as_bytes("a")), "d4dfdca90c5e5018");
  EXPECT_EQ(hex_digest(as_bytes("hello world, pstwin")), "124813ab6dfe00fc");
}

TEST(Digest, SplittingDoesNotMatter) {
  std::vector<std::byte> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + 17);
  const std::string whole = hex_digest(data);
  EXPECT_EQ(whole.size(), 16u);
  for (std::size_t chunk : {1, 3, 7, 8, 9, 64, 999}) {
    Digest d;
    for (std::size_t off = 0; off < data.size(); off += chunk) {
      d.update(std::span(data).subspan(off, std::min(chunk, data.size() - off)));
    }
    EXPECT_EQ(d.hex(), whole) << "chunk " << chunk;
  }
  // hex() does not consume the state.
  Digest d;
  d.update(std::span(data).first(500));
  (void)d.hex();
  d.update(std::span(data).subspan(500));
  EXPECT_EQ(d.hex(), whole);
}

TEST(Digest, U64IsLittleEndianBytes) {
  Digest a;
  a.update_u64(0x0102030405060708ULL);
  const std::array<std::byte, 8> le{std::byte{8}, std::byte{7}, std::byte{6}, std::byte{5},
                                    std::byte{4}, std::byte{3}, std::byte{2}, std::byte{1}};
  EXPECT_EQ(a.hex(), hex_digest(le));
}

TEST(Digest, SensitiveToContentLengthAndSignBits) {
  std::set<std::string> seen;
  seen.insert(hex_digest({}));
  const std::array<std::byte, 1> zero1{};
  const std::array<std::byte, 8> zero8{};
  const std::array<std::byte, 9> zero9{};
  seen.insert(hex_digest(zero1));
  seen.insert(hex_digest(zero8));
  seen.insert(hex_digest(zero9));
  EXPECT_EQ(seen.size(), 4u);  // trailing zeros and length both count

  // Flipping the sign of two floats (top bits of two words) must not cancel out.
  std::vector<float> values(64, 1.0f);
  const std::string base = hex_digest(std::as_bytes(std::span(values)));
  values[1] = -1.0f;
  values[3] = -1.0f;
  EXPECT_NE(hex_digest(std::as_bytes(std::span(values))), base);
  // Every single-bit flip over a 32-byte input changes the digest.
  std::vector<std::byte> data(32, std::byte{0x5A});
  const std::string ref = hex_digest(data);
  for (std::size_t bit = 0; bit < data.size() * 8; ++bit) {
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    EXPECT_NE(hex_digest(data), ref) << bit;
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace pstwin
