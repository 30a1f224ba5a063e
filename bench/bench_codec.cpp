// Header codec cost per message: encode/decode of the 64-byte header alone, and with the payload CRC
// (the part that scales with message size). Bytes/s counts payload bytes where a payload is involved.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/codec.hpp"

namespace {

using namespace pstwin;

MessageHeader sample_header() {
  MessageHeader h;
  h.sender = 9;
  h.recipient = 8;
  h.command = Command::kPush;
  h.sequence = 123456;
  h.iteration = 42;
  h.key = 0xDEADBEEF;
  return h;
}

Payload sample_payload(std::size_t bytes) {
  auto buffer = std::make_shared<ByteBuffer>(bytes);
  for (std::size_t i = 0; i < bytes; ++i) buffer->data()[i] = static_cast<std::byte>(i * 31);
  return Payload::adopt(buffer);
}

// Header only: phantom payload, so no payload bytes are touched.
void BM_EncodeHeader(benchmark::State& state) {
  const MessageHeader h = sample_header();
  const Payload p = Payload::phantom(1 << 20);
  for (auto _ : state) benchmark::DoNotOptimize(encode_header(h, p));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kHeaderBytes));
}
BENCHMARK(BM_EncodeHeader);

void BM_DecodeHeader(benchmark::State& state) {
  const HeaderBytes bytes = encode_header(sample_header(), Payload::phantom(1 << 20));
  MessageHeader out;
  bool phantom = false;
  for (auto _ : state) {
    benchmark::DoNotOptimize(decode_header(bytes, out, phantom));
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kHeaderBytes));
}
BENCHMARK(BM_DecodeHeader);

// Encode with a real payload; arg 1 computes the payload CRC, arg 0 leaves it to the transport.
void BM_EncodeHeaderPayload(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const bool crc = state.range(1) != 0;
  const MessageHeader h = sample_header();
  const Payload p = sample_payload(size);
  for (auto _ : state) benchmark::DoNotOptimize(encode_header(h, p, crc));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
  state.SetLabel(crc ? "with payload CRC" : "no payload CRC");
}
BENCHMARK(BM_EncodeHeaderPayload)
    ->ArgNames({"bytes", "crc"})
    ->Args({4 << 10, 0})
    ->Args({4 << 10, 1})
    ->Args({1 << 20, 0})
    ->Args({1 << 20, 1});

// Full receive path: header checks, payload CRC verification and the copy into a fresh buffer.
void BM_DecodeFrame(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  Message m;
  m.header = sample_header();
  m.payload = sample_payload(size);
  const std::string frame = encode_frame(m);
  const auto bytes = std::as_bytes(std::span(frame));
  for (auto _ : state) {
    Message out;
    benchmark::DoNotOptimize(decode_frame(bytes, out));
    benchmark::DoNotOptimize(out.payload.size());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
}
BENCHMARK(BM_DecodeFrame)->ArgName("bytes")->Arg(4 << 10)->Arg(1 << 20);

// The CRC on its own, to separate it from the copy in BM_DecodeFrame.
void BM_PayloadCrc32(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const Payload p = sample_payload(size);
  for (auto _ : state) benchmark::DoNotOptimize(payload_crc32(p.bytes()));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
}
BENCHMARK(BM_PayloadCrc32)->ArgName("bytes")->Arg(4 << 10)->Arg(1 << 20);

}  // namespace
