// IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or plain, read with bounds checks.
// Format: 4-byte magic {0, 0, type, rank} (type 0x08 = unsigned byte), `rank` big-endian uint32
// dimensions, then the row-major data. Every error names the file, the field and the fix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace pstwin::train {

// Debian's dataset-fashion-mnist installs the four files here.
inline constexpr std::string_view kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One IDX array of unsigned bytes.
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;  // row-major, product(dims) bytes
};

// Reads `path` (gzip or plain: zlib detects which) and checks it is an unsigned-byte array of
// `expected_rank` dimensions whose data is complete. Trailing bytes are an error too.
IdxArray read_idx(const std::filesystem::path& path, int expected_rank);

// A labelled image set: images as float32 in [0, 1] (byte / 255), one row of rows*cols per sample.
class ImageDataset {
 public:
  ImageDataset(std::size_t rows, std::size_t cols, std::vector<float> pixels,
               std::vector<std::uint8_t> labels);

  std::size_t size() const { return labels_.size(); }
  std::size_t features() const { return rows_ * cols_; }
  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  std::span<const float> image(std::size_t index) const;
  std::uint8_t label(std::size_t index) const { return labels_.at(index); }
  std::span<const std::uint8_t> labels() const { return labels_; }
  std::span<const float> pixels() const { return pixels_; }

  // Copies the samples named by `indices` into `x` (size indices * features, sample after sample)
  // and their labels into `y`. Throws std::out_of_range on a bad index or a short buffer.
  void gather(std::span<const std::uint32_t> indices, std::span<float> x, std::span<std::uint8_t> y) const;

 private:
  std::size_t rows_ = 0;
  std::size_t cols_ = 0;
  std::vector<float> pixels_;
  std::vector<std::uint8_t> labels_;
};

enum class Split { kTrain, kTest };

// Loads one split of Fashion-MNIST from `dir` (train: 60,000 images, test: 10,000; 28x28; labels
// 0..9), checking that image and label counts agree and every label is below 10.
ImageDataset load_fashion_mnist(Split split, const std::filesystem::path& dir = kFashionMnistDir);

// load_fashion_mnist once per (split, dir) per process, shared read-only from then on: the simulator
// runs every worker in one process, and the training split is 188 MB as float32. Thread-safe.
const ImageDataset& shared_fashion_mnist(Split split, const std::filesystem::path& dir = kFashionMnistDir);

}  // namespace pstwin::train
