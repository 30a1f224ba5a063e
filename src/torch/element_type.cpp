#include "torch/element_type.hpp"

#include <Eigen/Core>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pstwin::torch {

namespace {

// Elementwise through a copy: the wire's bytes carry no alignment promise for T.
template <typename T, typename Acc = T>
void add_as(std::span<std::byte> sum, std::span<const std::byte> part) {
  const std::size_t n = sum.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    T a;
    T b;
    std::memcpy(&a, sum.data() + i * sizeof(T), sizeof(T));
    std::memcpy(&b, part.data() + i * sizeof(T), sizeof(T));
    const T total = static_cast<T>(static_cast<Acc>(a) + static_cast<Acc>(b));
    std::memcpy(sum.data() + i * sizeof(T), &total, sizeof(T));
  }
}

}  // namespace

std::optional<ElementType> element_type_of_cmd(int cmd) {
  if (cmd < 0 || cmd > static_cast<int>(ElementType::kInt64)) return std::nullopt;
  return static_cast<ElementType>(cmd);
}

std::optional<ElementType> element_type_of_format(std::string_view format, std::size_t item_size) {
  // A buffer's format may carry a byte-order or alignment prefix ('<', '=', '@'); native order is all
  // a tensor on this machine has.
  if (format.size() == 2 && (format[0] == '<' || format[0] == '=' || format[0] == '@'))
    format.remove_prefix(1);
  if (format.size() != 1) return std::nullopt;
  switch (format[0]) {
    case 'f':
      return item_size == 4 ? std::optional(ElementType::kFloat32) : std::nullopt;
    case 'e':
      return item_size == 2 ? std::optional(ElementType::kFloat16) : std::nullopt;
    case 'd':
      return item_size == 8 ? std::optional(ElementType::kFloat64) : std::nullopt;
    case 'i':
      return item_size == 4 ? std::optional(ElementType::kInt32) : std::nullopt;
    case 'l':
    case 'q':
      return item_size == 8 ? std::optional(ElementType::kInt64) : std::nullopt;
    default:
      return std::nullopt;
  }
}

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kFloat16:
      return 2;
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
    case ElementType::kFloat64:
    case ElementType::kInt64:
      return 8;
  }
  return 1;
}

std::string_view element_name(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return "float32";
    case ElementType::kFloat16:
      return "float16";
    case ElementType::kFloat64:
      return "float64";
    case ElementType::kInt32:
      return "int32";
    case ElementType::kInt64:
      return "int64";
  }
  return "unknown";
}

void add_elements(ElementType type, std::span<std::byte> sum, std::span<const std::byte> part) {
  switch (type) {
    case ElementType::kFloat32:
      return add_as<float>(sum, part);
    case ElementType::kFloat16:
      // Each addition rounds to half, as BytePS's server sums fp16 gradients.
      return add_as<Eigen::half, float>(sum, part);
    case ElementType::kFloat64:
      return add_as<double>(sum, part);
    case ElementType::kInt32:
      return add_as<std::int32_t, std::uint32_t>(sum, part);  // wraps, never UB
    case ElementType::kInt64:
      return add_as<std::int64_t, std::uint64_t>(sum, part);
  }
}

}  // namespace pstwin::torch
