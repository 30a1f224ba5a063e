#include "train/idx_dataset.hpp"

#include <zlib.h>

#include <fmt/core.h>
#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace pstwin::train {

namespace {

constexpr std::uint8_t kUnsignedByte = 0x08;
// Far above any image set we train on; stops a corrupt header from asking for terabytes.
constexpr std::uint64_t kMaxDataBytes = std::uint64_t{1} << 32;

std::string fix_hint() {
  return "fix: install the data set (apt-get install dataset-fashion-mnist) or point the dataset "
         "directory at intact IDX files";
}

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw DatasetError(fmt::format("IDX file {}: {}; {}", path.string(), what, fix_hint()));
}

// The whole file as bytes. Data sets are tens of MB, so one read beats streaming.
std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, "no such file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, fmt::format("cannot read its size: {}", ec.message()));
  if (size > kMaxDataBytes) fail(path, fmt::format("{} bytes is larger than any IDX file we read", size));
  std::vector<std::uint8_t> bytes(size);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    fail(path, "cannot read it");
  }
  return bytes;
}

struct InflateStream {
  z_stream z{};
  InflateStream() = default;
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;
  ~InflateStream() { inflateEnd(&z); }
};

// Decompresses one gzip member; a stream cut short or followed by stray bytes is an error naming
// how far it got in both the compressed and the decompressed bytes.
std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> packed, const std::filesystem::path& path) {
  InflateStream stream;
  if (inflateInit2(&stream.z, 16 + MAX_WBITS) != Z_OK) fail(path, "zlib could not start inflating");
  stream.z.next_in = const_cast<Bytef*>(packed.data());  // zlib's API is not const-correct
  stream.z.avail_in = static_cast<uInt>(packed.size());
  std::vector<std::uint8_t> out(std::max<std::size_t>(packed.size() * 2, 4096));
  std::size_t produced = 0;
  for (;;) {
    if (produced == out.size()) {
      if (out.size() > kMaxDataBytes)
        fail(path, fmt::format("decompresses to more than {} bytes", kMaxDataBytes));
      out.resize(out.size() * 2);
    }
    stream.z.next_out = out.data() + produced;
    stream.z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - produced, UINT_MAX));
    const uInt room = stream.z.avail_out;
    const int code = inflate(&stream.z, Z_NO_FLUSH);
    produced += room - stream.z.avail_out;
    const std::size_t consumed = packed.size() - stream.z.avail_in;
    if (code == Z_STREAM_END) {
      if (stream.z.avail_in != 0) {
        fail(path, fmt::format("{} unexpected bytes after the gzip stream (compressed byte {} of {})",
                               stream.z.avail_in, consumed, packed.size()));
      }
      break;
    }
    if (code == Z_BUF_ERROR && stream.z.avail_in == 0) {
      fail(path, fmt::format("truncated gzip stream: the file ends at compressed byte {} before the stream "
                             "does, after {} decompressed bytes",
                             packed.size(), produced));
    }
    if (code != Z_OK && code != Z_BUF_ERROR) {
      fail(path, fmt::format("damaged gzip data at compressed byte {} (after {} decompressed bytes): {}",
                             consumed, produced, stream.z.msg ? stream.z.msg : "zlib error"));
    }
  }
  out.resize(produced);
  return out;
}

std::uint32_t big_endian(std::span<const std::uint8_t> b) {
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
}

}  // namespace

IdxArray read_idx(const std::filesystem::path& path, int expected_rank) {
  std::vector<std::uint8_t> bytes = read_file(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) bytes = gunzip(bytes, path);

  if (bytes.size() < 4) {
    fail(path, fmt::format("truncated at byte {}: the magic number needs 4 bytes", bytes.size()));
  }
  const std::uint32_t magic = big_endian(bytes);
  const auto expected_magic = static_cast<std::uint32_t>((kUnsignedByte << 8) | expected_rank);
  if (magic != expected_magic) {
    fail(path, fmt::format("magic 0x{:08x} is not an IDX file of unsigned bytes with {} dimension(s) "
                           "(expected 0x{:08x})",
                           magic, expected_rank, expected_magic));
  }

  IdxArray array;
  std::size_t offset = 4;
  std::uint64_t total = 1;
  for (int d = 0; d < expected_rank; ++d) {
    if (bytes.size() < offset + 4) {
      fail(path, fmt::format("truncated at byte {}: dimension {} of {} needs 4 bytes", bytes.size(), d + 1,
                             expected_rank));
    }
    const std::uint32_t dim = big_endian(std::span(bytes).subspan(offset, 4));
    offset += 4;
    if (dim == 0) fail(path, fmt::format("dimension {} (dims[{}]) is 0", d + 1, d));
    total *= dim;
    if (total > kMaxDataBytes) {
      fail(path, fmt::format("dims give more than {} bytes of data (dims[{}] = {})", kMaxDataBytes, d, dim));
    }
    array.dims.push_back(dim);
  }
  if (bytes.size() < offset + total) {
    fail(path, fmt::format("truncated at byte {}: the header promises {} data bytes ({} bytes in all), only "
                           "{} present",
                           bytes.size(), total, offset + total, bytes.size() - offset));
  }
  if (bytes.size() > offset + total) {
    fail(path, fmt::format("unexpected data after byte {}: the dims account for {} data bytes only, the file "
                           "has {} bytes in all",
                           offset + total, total, bytes.size()));
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
  array.data = std::move(bytes);
  return array;
}

ImageDataset::ImageDataset(std::size_t rows, std::size_t cols, std::vector<float> pixels,
                           std::vector<std::uint8_t> labels)
    : rows_(rows), cols_(cols), pixels_(std::move(pixels)), labels_(std::move(labels)) {
  if (pixels_.size() != labels_.size() * rows_ * cols_) {
    throw std::invalid_argument(fmt::format("ImageDataset: {} pixels for {} labels of {}x{} images",
                                            pixels_.size(), labels_.size(), rows_, cols_));
  }
}

std::span<const float> ImageDataset::image(std::size_t index) const {
  if (index >= size()) {
    throw std::out_of_range(fmt::format("ImageDataset: image {} of {}", index, size()));
  }
  return std::span(pixels_).subspan(index * features(), features());
}

void ImageDataset::gather(std::span<const std::uint32_t> indices, std::span<float> x,
                          std::span<std::uint8_t> y) const {
  const std::size_t n = features();
  if (x.size() < indices.size() * n || y.size() < indices.size()) {
    throw std::out_of_range(
        fmt::format("ImageDataset::gather: buffers for {} samples hold {} floats, {} labels", indices.size(),
                    x.size(), y.size()));
  }
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto source = image(indices[i]);
    std::copy(source.begin(), source.end(), x.begin() + static_cast<std::ptrdiff_t>(i * n));
    y[i] = labels_[indices[i]];
  }
}

ImageDataset load_fashion_mnist(Split split, const std::filesystem::path& dir) {
  const bool train = split == Split::kTrain;
  const std::size_t expected = train ? 60000 : 10000;
  const auto image_path = dir / (train ? "train-images-idx3-ubyte.gz" : "t10k-images-idx3-ubyte.gz");
  const auto label_path = dir / (train ? "train-labels-idx1-ubyte.gz" : "t10k-labels-idx1-ubyte.gz");

  IdxArray images = read_idx(image_path, 3);
  IdxArray labels = read_idx(label_path, 1);
  if (images.dims[0] != expected) {
    fail(image_path, fmt::format("count (dims[0]) is {}, Fashion-MNIST has {} images in this split",
                                 images.dims[0], expected));
  }
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    fail(image_path, fmt::format("dims are {}x{} pixels, Fashion-MNIST images are 28x28", images.dims[1],
                                 images.dims[2]));
  }
  if (labels.dims[0] != images.dims[0]) {
    fail(label_path, fmt::format("count (dims[0]) is {} labels but {} has {} images", labels.dims[0],
                                 image_path.filename().string(), images.dims[0]));
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kFashionMnistClasses) {
      fail(label_path, fmt::format("label {} at index {} (byte {}) is not a class 0..{}", labels.data[i], i,
                                   8 + i, kFashionMnistClasses - 1));
    }
  }
  std::vector<float> pixels(images.data.size());
  std::transform(images.data.begin(), images.data.end(), pixels.begin(),
                 [](std::uint8_t v) { return static_cast<float>(v) / 255.0f; });
  return ImageDataset(images.dims[1], images.dims[2], std::move(pixels), std::move(labels.data));
}

const ImageDataset& shared_fashion_mnist(Split split, const std::filesystem::path& dir) {
  static std::mutex mutex;
  static std::map<std::pair<Split, std::filesystem::path>, std::unique_ptr<const ImageDataset>> loaded;
  const std::scoped_lock lock(mutex);
  auto& slot = loaded[{split, dir}];
  if (!slot) slot = std::make_unique<const ImageDataset>(load_fashion_mnist(split, dir));
  return *slot;
}

}  // namespace pstwin::train
