// A floor for the loopback bench's large figures, with no pstwin code: the same bytes in the same
// pattern, done as directly as this machine allows. Two worker threads and one server thread in one
// process, one TCP connection per worker on 127.0.0.1 (TCP_NODELAY), every socket non-blocking under
// poll, so nobody waits on a write while bytes wait to be read. Each worker streams its values
// (filled or not, CRC'd or not, ISA-L as the vans), at most `--credit` values ahead of the sums it
// has read back; the server reads both streams into reused buffers (turns of at most 1 MiB per
// socket, as the epoll van's read budget, CRCing each read), sums the second into the first one
// chunk at a time as soon as both workers' chunk is in, and writes each summed chunk to both
// workers at once (CRCing it first); each worker reads the sums into reused buffers, CRCing each
// read. `--chunk` smaller than the value overlaps the passes: the server sums chunk k while k+1
// arrives and answers k while summing k+1 (pstwin's partitioning does that with ps.partition_bytes).
// Prints p50 / p99 of the slower worker's value (from its fill to its sum's last byte), first tenth
// dropped, and (push + pull bytes of both workers) / time, as bench_loopback counts them.
//
// usage: bench_floor_large [--size BYTES] [--rounds N] [--crc 0|1] [--fill 0|1] [--chunk BYTES]
//                          [--credit N]
//   --fill 0: a value is written once, not every round (the ps-lite harness's default)
//   --credit 1: blocking (a worker sends a value once the last one's sum is back); 4: pipelined
#include <arpa/inet.h>
#include <fcntl.h>
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

void prepare(const Socket& s) {
  const int one = 1;
  setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(s.fd(), F_SETFL, ::fcntl(s.fd(), F_GETFL) | O_NONBLOCK);
}

std::uint32_t crc_of(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

// Writes what the socket takes of `bytes`; 0 when it takes nothing now.
std::size_t write_some(const Socket& s, std::span<const std::byte> bytes) {
  const ssize_t n = ::send(s.fd(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (n >= 0) return static_cast<std::size_t>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  throw std::runtime_error(std::string("send: ") + std::strerror(errno));
}

// Reads what is there, up to `into.size()` bytes; 0 when nothing is there now.
std::size_t read_some(const Socket& s, std::span<std::byte> into) {
  const ssize_t n = ::read(s.fd(), into.data(), into.size());
  if (n > 0) return static_cast<std::size_t>(n);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  throw std::runtime_error(std::string("read: ") + (n == 0 ? "peer closed" : std::strerror(errno)));
}

struct Options {
  std::size_t size = 16 << 20;
  int rounds = 60;
  bool crc = true;
  bool fill = true;
  std::size_t chunk = 0;  // 0: the value's size
  int credit = 1;
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
    else if (arg == "--chunk")
      o.chunk = std::stoull(value);
    else if (arg == "--credit")
      o.credit = std::stoi(value);
    else
      throw std::invalid_argument("unknown argument '" + std::string(arg) + "'");
  }
  if (o.size < sizeof(float) || o.size % sizeof(float) != 0)
    throw std::invalid_argument("--size " + std::to_string(o.size) + ": expected a positive multiple of 4");
  if (o.chunk == 0) o.chunk = o.size;
  if (o.chunk % sizeof(float) != 0 || o.chunk > o.size)
    throw std::invalid_argument("--chunk " + std::to_string(o.chunk) +
                                ": expected a multiple of 4, at most --size");
  if (o.rounds < 10) throw std::invalid_argument("--rounds " + std::to_string(o.rounds) + ": expected >= 10");
  if (o.credit < 1 || o.credit > 64)
    throw std::invalid_argument("--credit " + std::to_string(o.credit) + ": expected 1-64");
  return o;
}

// A stream of `rounds` values of `size` bytes, in `credit` reused buffers: byte `at` of the stream
// is byte at % size of value at / size, in buffer (at / size) % credit.
struct Ring {
  std::size_t size;
  std::vector<std::vector<float>> values;
  Ring(std::size_t size_bytes, int credit)
      : size(size_bytes),
        values(static_cast<std::size_t>(credit), std::vector<float>(size_bytes / sizeof(float))) {}
  // The bytes from stream position `at` to the end of its value.
  std::span<std::byte> from(std::uint64_t at) {
    auto bytes = std::as_writable_bytes(std::span(values[(at / size) % values.size()]));
    return bytes.subspan(at % size);
  }
};

volatile std::uint32_t sink = 0;  // keeps the CRCs from being optimised away

void run_worker(const Options& o, const sockaddr_in& address, int w, std::vector<double>& times) {
  Socket s(::socket(AF_INET, SOCK_STREAM, 0));
  if (::connect(s.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  prepare(s);
  Ring push(o.size, o.credit);
  Ring pull(o.size, o.credit);
  const std::uint64_t total = static_cast<std::uint64_t>(o.rounds) * o.size;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  std::vector<Clock::time_point> started(static_cast<std::size_t>(o.rounds));
  constexpr std::array<float, 8> kTable{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f, 7.5f};
  while (received < total) {
    // A value may go once the value `credit` before it has come back summed.
    const bool may_send =
        sent < total && sent / o.size < received / o.size + static_cast<std::uint64_t>(o.credit);
    bool progressed = false;
    if (may_send) {
      const std::uint64_t value = sent / o.size;
      if (sent % o.size == 0) {
        started[value] = Clock::now();
        auto& floats = push.values[value % push.values.size()];
        if (o.fill || value < static_cast<std::uint64_t>(o.credit))
          for (std::size_t i = 0; i < floats.size(); ++i)
            floats[i] = kTable[(i + static_cast<std::size_t>(value) + static_cast<std::size_t>(w)) % 8];
      }
      const auto bytes = push.from(sent).first(std::min<std::size_t>(push.from(sent).size(), o.chunk));
      const std::size_t n = write_some(s, bytes);
      if (o.crc && n > 0) sink = crc_of(bytes.first(n));  // just sent: in cache, as a chunked CRC would be
      sent += n;
      progressed = n > 0;
    }
    auto into = pull.from(received);
    const std::size_t n = read_some(s, into.first(std::min(into.size(), kTurnBytes)));
    if (n > 0) {
      if (o.crc) sink = crc_of(into.first(n));
      received += n;
      if (received % o.size == 0)
        times.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - started[received / o.size - 1]).count());
      progressed = true;
    }
    if (!progressed) {
      pollfd ready{s.fd(), static_cast<short>(POLLIN | (may_send ? POLLOUT : 0)), 0};
      ::poll(&ready, 1, -1);
    }
  }
}

void run_server(const Options& o, std::array<Socket, 2>& peers) {
  std::array<Ring, 2> in{Ring(o.size, o.credit), Ring(o.size, o.credit)};
  const std::uint64_t total = static_cast<std::uint64_t>(o.rounds) * o.size;
  std::array<std::uint64_t, 2> have{0, 0};      // stream bytes read from each worker
  std::array<std::uint64_t, 2> answered{0, 0};  // summed bytes written to each worker
  std::uint64_t summed = 0;
  while (answered[0] < total || answered[1] < total) {
    bool progressed = false;
    for (std::size_t i = 0; i < 2; ++i) {
      if (have[i] == total) continue;
      auto into = in[i].from(have[i]);
      const std::size_t n = read_some(peers[i], into.first(std::min(into.size(), kTurnBytes)));
      if (o.crc && n > 0) sink = crc_of(into.first(n));
      have[i] += n;
      progressed = progressed || n > 0;
    }
    // Sum every chunk both workers have sent, then answer it.
    for (;;) {
      const std::uint64_t value_end = (summed / o.size + 1) * o.size;
      const std::uint64_t chunk_end = std::min<std::uint64_t>(summed + o.chunk, value_end);
      if (summed == total || std::min(have[0], have[1]) < chunk_end) break;
      const std::size_t count = (chunk_end - summed) / sizeof(float);
      float* into = reinterpret_cast<float*>(in[0].from(summed).data());
      const float* other = reinterpret_cast<const float*>(in[1].from(summed).data());
      for (std::size_t k = 0; k < count; ++k) into[k] += other[k];
      if (o.crc) sink = crc_of(in[0].from(summed).first(chunk_end - summed));
      summed = chunk_end;
      progressed = true;
    }
    for (std::size_t i = 0; i < 2; ++i) {
      if (answered[i] == summed) continue;
      const auto bytes = in[0].from(answered[i]);
      const std::size_t n =
          write_some(peers[i], bytes.first(std::min<std::uint64_t>(bytes.size(), summed - answered[i])));
      answered[i] += n;
      progressed = progressed || n > 0;
    }
    if (!progressed) {
      std::array<pollfd, 2> ready{};
      for (std::size_t i = 0; i < 2; ++i)
        ready[i] = {peers[i].fd(),
                    static_cast<short>((have[i] < total ? POLLIN : 0) | (answered[i] < summed ? POLLOUT : 0)),
                    0};
      ::poll(ready.data(), ready.size(), -1);
    }
  }
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
  const auto start = Clock::now();
  std::jthread w0(run_worker, std::cref(o), std::cref(address), 0, std::ref(times[0]));
  std::jthread w1(run_worker, std::cref(o), std::cref(address), 1, std::ref(times[1]));
  std::array<Socket, 2> peers{Socket(::accept(listener.fd(), nullptr, nullptr)),
                              Socket(::accept(listener.fd(), nullptr, nullptr))};
  for (const auto& peer : peers) prepare(peer);
  run_server(o, peers);
  w0.join();
  w1.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> slower;
  for (std::size_t r = 0; r < times[0].size(); ++r) slower.push_back(std::max(times[0][r], times[1][r]));
  slower.erase(slower.begin(), slower.begin() + static_cast<std::ptrdiff_t>(slower.size() / 10));
  std::sort(slower.begin(), slower.end());
  const double bytes = 2.0 * 2.0 * static_cast<double>(o.size) * o.rounds;  // push + pull, both workers
  std::printf("floor %zu B, chunk %zu B, credit %d, crc %d, fill %d: p50 %.1f us p99 %.1f us, %.3f GB/s\n",
              o.size, o.chunk, o.credit, o.crc ? 1 : 0, o.fill ? 1 : 0, slower[slower.size() / 2],
              slower[slower.size() * 99 / 100], bytes / seconds / 1e9);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr,
               "bench_floor_large: %s; usage: bench_floor_large [--size BYTES] [--rounds N] "
               "[--crc 0|1] [--fill 0|1] [--chunk BYTES] [--credit N]\n",
               e.what());
  return 2;
}
