// The element types push_pull carries and how a server sums them. The type travels in the request's
// cmd (ps-lite's meta.head), so a server needs no declaration step before the first push.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pstwin::torch {

enum class ElementType : int { kFloat32 = 0, kFloat16 = 1, kFloat64 = 2, kInt32 = 3, kInt64 = 4 };

// The type of a cmd received from the wire; nullopt for a value no worker of this module sends.
std::optional<ElementType> element_type_of_cmd(int cmd);
// The type of a Python buffer (its struct format and item size); nullopt for anything else.
std::optional<ElementType> element_type_of_format(std::string_view format, std::size_t item_size);
std::size_t element_size(ElementType type);
std::string_view element_name(ElementType type);

// sum[i] += part[i] element by element; both hold whole elements of `type` and have the same size.
void add_elements(ElementType type, std::span<std::byte> sum, std::span<const std::byte> part);

}  // namespace pstwin::torch
