// Two EpollTransport endpoints on 127.0.0.1 against plain blocking TCP sockets in the same run:
// 4 KB blocking round trip (p50/p99), 1 MB and 4 KB streaming throughput, and the ratios.
// Usage: bench_epoll [rounds=20000] [stream_mb=2048]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "realnet/epoll_transport.hpp"

namespace {

using pstwin::Message;
using pstwin::realnet::EpollTransport;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

Message message_of(std::size_t bytes) {
  Message m;
  m.header.command = pstwin::Command::kPush;
  m.payload = pstwin::Payload::adopt(std::make_shared<pstwin::ByteBuffer>(bytes));
  return m;
}

struct Latency {
  double p50_us, p99_us;
};

Latency percentiles(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2] * 1e6, samples[samples.size() * 99 / 100] * 1e6};
}

// ---- the transport ----

struct Pair {
  std::atomic<std::uint64_t> a_received{0};
  std::atomic<std::uint64_t> b_bytes{0};
  bool echo = false;
  std::unique_ptr<EpollTransport> a, b;

  Pair() {
    auto fail = [](const pstwin::realnet::TransportError& e) {
      std::fprintf(stderr, "transport error: %s\n", e.to_string().c_str());
      std::exit(1);
    };
    a = std::make_unique<EpollTransport>(2, EpollTransport::Options{},
                                         EpollTransport::Callbacks{[this](Message) {
                                                                     a_received.fetch_add(1);
                                                                     a_received.notify_one();
                                                                   },
                                                                   fail});
    b = std::make_unique<EpollTransport>(3, EpollTransport::Options{},
                                         EpollTransport::Callbacks{[this](Message m) {
                                                                     const auto n = m.payload.size() + 64;
                                                                     if (echo) (void)b->send(2, std::move(m));
                                                                     b_bytes.fetch_add(n);
                                                                     b_bytes.notify_one();
                                                                   },
                                                                   fail});
    (void)a->connect(3, "127.0.0.1", b->port());
    (void)b->connect(2, "127.0.0.1", a->port());
  }
};

Latency transport_round_trip(int rounds) {
  Pair pair;
  pair.echo = true;
  const Message m = message_of(4096);
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto before = pair.a_received.load();
    const auto start = Clock::now();
    (void)pair.a->send(3, Message{m.header, m.payload});
    while (pair.a_received.load() == before) pair.a_received.wait(before);
    samples.push_back(seconds_since(start));
  }
  return percentiles(samples);
}

double transport_stream(std::size_t bytes, std::uint64_t total) {
  Pair pair;
  const Message m = message_of(bytes);
  const std::uint64_t count = total / bytes;
  const std::uint64_t expect = count * (bytes + 64);
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < count; ++i) {
    Message copy{m.header, m.payload};
    copy.header.key = i;
    (void)pair.a->send(3, std::move(copy));
    // Keep at most ~64 MB queued, as a PS with a credit bound would.
    while (i * (bytes + 64) > pair.b_bytes.load() + (std::uint64_t{64} << 20)) {
      std::this_thread::yield();
    }
  }
  for (auto got = pair.b_bytes.load(); got < expect; got = pair.b_bytes.load()) pair.b_bytes.wait(got);
  return static_cast<double>(expect) / seconds_since(start);
}

// ---- raw blocking TCP ----

struct RawPair {
  int client = -1, server = -1;
  RawPair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listener, 1);
    socklen_t length = sizeof address;
    getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address);
    server = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawPair() {
    ::close(client);
    ::close(server);
  }
};

void read_all(int fd, std::byte* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::read(fd, data, size);
    if (n <= 0) std::exit(1);
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const std::byte* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n <= 0) std::exit(1);
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

Latency raw_round_trip(int rounds) {
  RawPair pair;
  constexpr std::size_t kFrame = 64 + 4096;
  std::thread echo([&] {
    std::vector<std::byte> buffer(kFrame);
    for (int i = 0; i < rounds; ++i) {
      read_all(pair.server, buffer.data(), kFrame);
      write_all(pair.server, buffer.data(), kFrame);
    }
  });
  std::vector<std::byte> buffer(kFrame);
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    write_all(pair.client, buffer.data(), kFrame);
    read_all(pair.client, buffer.data(), kFrame);
    samples.push_back(seconds_since(start));
  }
  echo.join();
  return percentiles(samples);
}

double raw_stream(std::size_t bytes, std::uint64_t total) {
  RawPair pair;
  const std::uint64_t count = total / bytes;
  const std::size_t frame = bytes + 64;
  std::thread reader([&] {
    std::vector<std::byte> buffer(std::max<std::size_t>(frame, 256 * 1024));
    std::uint64_t left = count * frame;
    while (left > 0) {
      const ssize_t n = ::read(pair.server, buffer.data(), std::min<std::uint64_t>(left, buffer.size()));
      if (n <= 0) std::exit(1);
      left -= static_cast<std::uint64_t>(n);
    }
  });
  std::vector<std::byte> header(64), payload(bytes);
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < count; ++i) {
    std::array<iovec, 2> iov{{{header.data(), 64}, {payload.data(), bytes}}};
    std::size_t left = frame;
    iovec* v = iov.data();
    int n_iov = 2;
    while (left > 0) {
      const ssize_t n = ::writev(pair.client, v, n_iov);
      if (n <= 0) std::exit(1);
      auto done = static_cast<std::size_t>(n);
      left -= done;
      while (n_iov > 0 && done >= v->iov_len) {
        done -= v->iov_len;
        ++v;
        --n_iov;
      }
      if (n_iov > 0) {
        v->iov_base = static_cast<std::byte*>(v->iov_base) + done;
        v->iov_len -= done;
      }
    }
  }
  reader.join();
  return static_cast<double>(count * frame) / seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20000;
  const std::uint64_t stream_bytes = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2048) << 20;
  const std::uint64_t small_bytes = stream_bytes / 8;

  auto measure = [](auto&& run) {
    const double cpu = cpu_seconds();
    const auto start = Clock::now();
    auto result = run();
    return std::tuple{result, seconds_since(start), cpu_seconds() - cpu};
  };
  const auto [epoll_lat, el_wall, el_cpu] = measure([&] { return transport_round_trip(rounds); });
  const auto [raw_lat, rl_wall, rl_cpu] = measure([&] { return raw_round_trip(rounds); });
  const auto [epoll_1m, e1_wall, e1_cpu] = measure([&] { return transport_stream(1 << 20, stream_bytes); });
  const auto [raw_1m, r1_wall, r1_cpu] = measure([&] { return raw_stream(1 << 20, stream_bytes); });
  const auto [epoll_4k, e4_wall, e4_cpu] = measure([&] { return transport_stream(4096, small_bytes); });
  const auto [raw_4k, r4_wall, r4_cpu] = measure([&] { return raw_stream(4096, small_bytes); });

  std::printf("%-28s %12s %12s %8s   (wall s / cpu s: epoll | raw)\n", "", "epoll", "raw TCP", "ratio");
  std::printf("%-28s %12.1f %12.1f %8.2f   %.2f/%.2f | %.2f/%.2f\n", "4 KB round trip p50 (us)",
              epoll_lat.p50_us, raw_lat.p50_us, epoll_lat.p50_us / raw_lat.p50_us, el_wall, el_cpu, rl_wall,
              rl_cpu);
  std::printf("%-28s %12.1f %12.1f %8.2f\n", "4 KB round trip p99 (us)", epoll_lat.p99_us, raw_lat.p99_us,
              epoll_lat.p99_us / raw_lat.p99_us);
  std::printf("%-28s %12.2f %12.2f %8.2f   %.2f/%.2f | %.2f/%.2f\n", "1 MB stream (GB/s)", epoll_1m / 1e9,
              raw_1m / 1e9, epoll_1m / raw_1m, e1_wall, e1_cpu, r1_wall, r1_cpu);
  std::printf("%-28s %12.2f %12.2f %8.2f   %.2f/%.2f | %.2f/%.2f\n", "4 KB stream (GB/s)", epoll_4k / 1e9,
              raw_4k / 1e9, epoll_4k / raw_4k, e4_wall, e4_cpu, r4_wall, r4_cpu);
  return 0;
}
