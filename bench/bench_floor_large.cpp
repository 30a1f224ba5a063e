// A floor for the loopback bench's large blocking figure, with no pstwin code: the same bytes in the
// same pattern. Two worker threads and one server thread in one process, one TCP connection per
// worker on 127.0.0.1 (TCP_NODELAY). Per round each worker fills its value (or not), optionally
// CRCs it (ISA-L, as the vans do), writes it; the server reads both values into reused buffers (in
// turns of at most 1 MiB per socket, as the epoll van's read budget), CRCs each read, sums the
// second into the first, CRCs the sum and writes it to both workers; each worker reads it into a
// reused buffer, CRCing each read. p50 / p99 of the slower worker's round, first tenth dropped.
//
// usage: bench_floor_large [--size BYTES] [--rounds N] [--crc 0|1] [--fill 0|1]
//   --fill 0: the value is written once, not every round (the ps-lite harness's default)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <isa-l/crc.h>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kTurnBytes = 1 << 20;

class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket& operator=(Socket&&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

void no_delay(const Socket& s) {
  const int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::uint32_t crc_of(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

void write_all(const Socket& s, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(s.fd(), bytes.data(), bytes.size());
    if (n <= 0) throw std::runtime_error(std::string("write: ") + std::strerror(errno));
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

// Reads up to `limit` bytes into `into`; returns how many (never 0: a closed peer throws).
std::size_t read_some(const Socket& s, std::span<std::byte> into, std::size_t limit) {
  const ssize_t n = ::read(s.fd(), into.data(), std::min(into.size(), limit));
  if (n <= 0)
    throw std::runtime_error(std::string("read: ") + (n == 0 ? "peer closed" : std::strerror(errno)));
  return static_cast<std::size_t>(n);
}

struct Options {
  std::size_t size = 16 << 20;
  int rounds = 60;
  bool crc = true;
  bool fill = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--size")
      o.size = std::stoull(value);
    else if (arg == "--rounds")
      o.rounds = std::stoi(value);
    else if (arg == "--crc")
      o.crc = value != "0";
    else if (arg == "--fill")
      o.fill = value != "0";
    else
      throw std::invalid_argument("unknown argument '" + std::string(arg) + "'");
  }
  if (o.size < sizeof(float) || o.size % sizeof(float) != 0)
    throw std::invalid_argument("--size " + std::to_string(o.size) + ": expected a positive multiple of 4");
  if (o.rounds < 10) throw std::invalid_argument("--rounds " + std::to_string(o.rounds) + ": expected >= 10");
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener.fd(), 4) != 0 ||
      ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error(std::string("listen on 127.0.0.1: ") + std::strerror(errno));

  std::array<std::vector<double>, 2> times;
  volatile std::uint32_t sink = 0;  // keeps the CRCs from being optimised away
  auto worker = [&](int w) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    no_delay(s);
    std::vector<float> push(o.size / sizeof(float));
    std::vector<std::byte> pull(o.size);
    constexpr std::array<float, 8> kTable{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f};
    for (int r = 0; r < o.rounds; ++r) {
      const auto start = Clock::now();
      if (o.fill || r == 0)
        for (std::size_t i = 0; i < push.size(); ++i)
          push[i] = kTable[(i + static_cast<std::size_t>(r + w)) % 8];
      const auto bytes = std::as_bytes(std::span(push));
      if (o.crc) sink = crc_of(bytes);
      write_all(s, bytes);
      std::uint32_t crc = 0;
      for (std::size_t have = 0; have < o.size;) {
        const std::size_t n = read_some(s, std::span(pull).subspan(have), o.size);
        if (o.crc) crc = crc_of(std::span(pull).subspan(have, n), crc);
        have += n;
      }
      sink = crc;
      times[static_cast<std::size_t>(w)].push_back(
          std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  };
  std::jthread w0(worker, 0);
  std::jthread w1(worker, 1);
  std::vector<Socket> peers;
  for (int i = 0; i < 2; ++i) {
    peers.emplace_back(::accept(listener.fd(), nullptr, nullptr));
    no_delay(peers.back());
  }
  std::array<std::vector<float>, 2> in{std::vector<float>(o.size / sizeof(float)),
                                       std::vector<float>(o.size / sizeof(float))};
  for (int r = 0; r < o.rounds; ++r) {
    std::array<std::size_t, 2> have{0, 0};
    while (have[0] < o.size || have[1] < o.size) {
      std::array<pollfd, 2> ready{pollfd{peers[0].fd(), POLLIN, 0}, pollfd{peers[1].fd(), POLLIN, 0}};
      ::poll(ready.data(), ready.size(), -1);
      for (std::size_t i = 0; i < 2; ++i) {
        if (have[i] == o.size || (ready[i].revents & (POLLIN | POLLHUP)) == 0) continue;
        const auto into = std::as_writable_bytes(std::span(in[i])).subspan(have[i]);
        const std::size_t n = read_some(peers[i], into, kTurnBytes);
        if (o.crc) sink = crc_of(into.first(n));
        have[i] += n;
      }
    }
    for (std::size_t i = 0; i < in[0].size(); ++i) in[0][i] += in[1][i];
    const auto sum = std::as_bytes(std::span(in[0]));
    if (o.crc) sink = crc_of(sum);
    write_all(peers[0], sum);
    write_all(peers[1], sum);
  }
  w0.join();
  w1.join();
  std::vector<double> slower;
  for (std::size_t r = 0; r < times[0].size(); ++r) slower.push_back(std::max(times[0][r], times[1][r]));
  slower.erase(slower.begin(), slower.begin() + static_cast<std::ptrdiff_t>(slower.size() / 10));
  std::sort(slower.begin(), slower.end());
  std::printf("floor %zu B, crc %d, fill %d: p50 %.1f us p99 %.1f us\n", o.size, o.crc ? 1 : 0,
              o.fill ? 1 : 0, slower[slower.size() / 2], slower[slower.size() * 99 / 100]);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr,
               "bench_floor_large: %s; usage: bench_floor_large [--size BYTES] [--rounds N] "
               "[--crc 0|1] [--fill 0|1]\n",
               e.what());
  return 2;
}
