// Scenario loading. Every field is declared once, in registry() below: its dotted path in the file,
// how its value is read and written (a codec), and its documentation. Parsing, defaults, unknown-field
// detection, resolved_toml() and the docs table are all driven by that one list.
#include "scenario/scenario.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wpedantic"
#include <toml++/toml.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string_view>

#include "core/digest.hpp"
#include "core/edit_distance.hpp"
#include "scenario/lb_tuning.hpp"
#include "scenario/resources.hpp"
#include "scenario/units.hpp"

namespace pstwin {
namespace {

using units::ParseStatus;
using units::Quantity;

constexpr std::string_view kLinksPath = "cluster.links";
constexpr std::array<std::string_view, 2> kLinkKeys{"bandwidth", "latency"};

std::vector<std::uint64_t> default_tensor_bytes() {
  return {4000000, 1000000, 256000, 64000};
}

template <typename E>
using EnumNames = std::span<const std::pair<E, std::string_view>>;

constexpr std::array<std::pair<Topology, std::string_view>, 2> kTopologyNames{
    {{Topology::kStar, "star"}, {Topology::kTwoTier, "two-tier"}}};
constexpr std::array<std::pair<TrainingMode, std::string_view>, 2> kModeNames{
    {{TrainingMode::kSync, "sync"}, {TrainingMode::kAsync, "async"}}};
constexpr std::array<std::pair<KeyHash, std::string_view>, 3> kKeyHashNames{
    {{KeyHash::kDjb2, "djb2"}, {KeyHash::kSdbm, "sdbm"}, {KeyHash::kNaive, "naive"}}};
constexpr std::array<std::pair<PayloadMode, std::string_view>, 2> kPayloadNames{
    {{PayloadMode::kReal, "real"}, {PayloadMode::kPhantom, "phantom"}}};
constexpr std::array<std::pair<StagingNaming, std::string_view>, 2> kNamingNames{
    {{StagingNaming::kPerRank, "per-rank"}, {StagingNaming::kLegacyKeyOnly, "legacy-key-only"}}};
constexpr std::array<std::pair<WorkloadKind, std::string_view>, 2> kWorkloadKindNames{
    {{WorkloadKind::kSynthetic, "synthetic"}, {WorkloadKind::kMlp, "mlp"}}};
constexpr std::array<std::pair<ShardingKind, std::string_view>, 2> kShardingNames{
    {{ShardingKind::kIid, "iid"}, {ShardingKind::kDirichlet, "dirichlet"}}};
constexpr std::array<std::pair<PushPullMode, std::string_view>, 2> kPushPullNames{
    {{PushPullMode::kSeparate, "separate"}, {PushPullMode::kFused, "fused"}}};
constexpr std::array<std::pair<Balancing, std::string_view>, 2> kBalancingNames{
    {{Balancing::kHash, "hash"}, {Balancing::kLb, "lb"}}};
constexpr std::array<std::pair<DeviceKind, std::string_view>, 2> kDeviceNames{
    {{DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}}};
constexpr std::array<std::pair<LocalReduce, std::string_view>, 3> kLocalReduceNames{
    {{LocalReduce::kNone, "none"}, {LocalReduce::kShm, "shm"}, {LocalReduce::kNccl, "nccl"}}};
constexpr std::array<std::string_view, 3> kNetworkModels{"LV08", "CM02", "SMPI"};
constexpr std::array<std::string_view, 2> kCoreScopes{"host", "machine"};
constexpr std::array<std::string_view, 3> kSimNetworkModels{"simgrid", "flow", "fifo"};
constexpr std::array<std::string_view, 3> kFifoHosts{"epoll", "kernel-pacing", "turns"};
constexpr std::array<std::string_view, 2> kFifoLinkBuckets{"tbf", "none"};
constexpr std::array<std::string_view, 2> kLrSchedules{"constant", "cosine"};
constexpr std::array<std::string_view, 3> kZenoScalings{"rescale", "clip", "none"};

template <typename E>
std::string_view enum_text(EnumNames<E> names, E value) {
  for (const auto& [v, text] : names) {
    if (v == value) return text;
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Text helpers

void append_escaping_controls(std::string& out, char c) {
  if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
    std::array<char, 8> buf{};
    std::snprintf(buf.data(), buf.size(), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    out += buf.data();
  } else {
    out += c;
  }
}

std::string quote_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        append_escaping_controls(out, c);
    }
  }
  return out + "\"";
}

// Well-formed UTF-8: no stray continuation byte, no truncated, overlong or surrogate sequence, no
// code point past U+10FFFF.
bool is_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    static constexpr std::array<std::uint32_t, 5> kSmallest{0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

// Control characters (terminal escapes) as \uXXXX, the rest as it is: for text that is echoed.
std::string without_controls(std::string_view text) {
  std::string out;
  for (const char c : text) append_escaping_controls(out, c);
  return out;
}

// A TOML key: bare when it can be, quoted otherwise.
std::string toml_key(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  return bare ? std::string(key) : quote_string(key);
}

std::string join(std::span<const std::string> items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string join_path(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : std::string(prefix) + "." + std::string(key);
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    parts.emplace_back(
        path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

std::string_view parent_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view{} : path.substr(0, dot);
}

std::string_view leaf_of(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string describe(const toml::node& node);

std::string describe_table(const toml::table& table) {
  if (table.empty()) return "{}";
  std::vector<std::string> items;
  for (const auto& [key, value] : table) items.push_back(toml_key(key.str()) + " = " + describe(value));
  return "{ " + join(items, ", ") + " }";
}

// The value as TOML text, for error messages.
std::string describe(const toml::node& node) {
  if (const auto* s = node.as_string()) return quote_string(s->get());
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return units::format_number(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = node.as_array()) {
    std::vector<std::string> items;
    for (const auto& element : *a) items.push_back(describe(element));
    return "[" + join(items, ", ") + "]";
  }
  if (const auto* t = node.as_table()) return describe_table(*t);
  std::ostringstream out;  // dates and times
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

const toml::node* find_node(const toml::table& root, std::string_view path) {
  const toml::table* table = &root;
  const auto parts = split_path(path);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const toml::node* node = table->get(parts[i]);
    if (node == nullptr || i + 1 == parts.size()) return node;
    table = node->as_table();
    if (table == nullptr) return nullptr;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Where a value came from: a line of the file, or a --set override.

class Origins {
 public:
  explicit Origins(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  void overridden(const std::string& path, std::string origin) {
    std::erase_if(overrides_, [&](const auto& entry) { return covers(path, entry.first); });
    overrides_[path] = std::move(origin);
  }

  // "file:line", "file" (a default, or no line known), or "--set path=value".
  std::string where(std::string_view path, const toml::node* node) const {
    const std::string* best = nullptr;
    for (const auto& [overridden_path, origin] : overrides_) {
      if (covers(overridden_path, path) && (best == nullptr || overridden_path.size() > best->size())) {
        best = &origin;
      }
    }
    if (best != nullptr) return *best;
    if (node != nullptr && node->source().begin.line > 0) {
      return file_ + ":" + std::to_string(node->source().begin.line);
    }
    return file_;
  }

 private:
  // Whether `path` is `outer` or lies inside it ("a.b" covers "a.b.c" and "a.b[2]").
  static bool covers(std::string_view outer, std::string_view path) {
    if (!path.starts_with(outer)) return false;
    return path.size() == outer.size() || path[outer.size()] == '.' || path[outer.size()] == '[';
  }

  std::string file_;
  std::map<std::string, std::string, std::less<>> overrides_;
};

// One value being read: what a codec needs to read it and to complain about it.
struct Value {
  const toml::node& node;
  std::string path;
  const Origins& origins;
  const Scenario& scenario;  // the fields read so far (links default to the host link)

  [[noreturn]] void fail(std::string_view problem) const {
    throw ScenarioError(origins.where(path, &node) + ": " + path + " = " + describe(node) + ": " +
                        std::string(problem));
  }

  Value element(std::size_t index, const toml::node& element_node) const {
    return Value{element_node, path + "[" + std::to_string(index) + "]", origins, scenario};
  }
  Value member(std::string_view key, const toml::node& member_node) const {
    return Value{member_node, join_path(path, key), origins, scenario};
  }
};

// ---------------------------------------------------------------------------------------------
// Codecs: how one kind of field is read, written and documented.

struct StringCodec {
  static constexpr bool kWantsString = true;  // --set name=123 means the text "123"
  static constexpr bool kIsList = false;
  std::string type() const { return "string"; }
  std::string read(const Value& v) const {
    if (const auto* s = v.node.as_string()) return s->get();
    v.fail("expected a string");
  }
  std::string write(const std::string& value) const { return quote_string(value); }
};

std::string choices_text(std::span<const std::string_view> choices) {
  std::vector<std::string> quoted;
  for (const auto& choice : choices) quoted.push_back(quote_string(choice));
  return join(quoted, ", ");
}

// A string from a fixed set (kept as a string in the struct).
struct ChoiceCodec {
  static constexpr bool kWantsString = true;
  static constexpr bool kIsList = false;
  std::span<const std::string_view> choices;
  std::string type() const { return "one of " + choices_text(choices); }
  std::string read(const Value& v) const {
    const auto* s = v.node.as_string();
    if (s != nullptr && std::find(choices.begin(), choices.end(), s->get()) != choices.end()) return s->get();
    v.fail("unknown value; expected one of " + choices_text(choices));
  }
  std::string write(const std::string& value) const { return quote_string(value); }
};

template <typename E>
struct EnumCodec {
  static constexpr bool kWantsString = true;
  static constexpr bool kIsList = false;
  EnumNames<E> names;
  std::string choices() const {
    std::vector<std::string_view> texts;
    for (const auto& entry : names) texts.push_back(entry.second);
    return choices_text(texts);
  }
  std::string type() const { return "one of " + choices(); }
  E read(const Value& v) const {
    if (const auto* s = v.node.as_string()) {
      for (const auto& [value, text] : names) {
        if (text == s->get()) return value;
      }
    }
    v.fail("unknown value; expected one of " + choices());
  }
  std::string write(E value) const { return quote_string(enum_text(names, value)); }
};

struct IntCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  int min = std::numeric_limits<int>::min();
  std::string type() const {
    return min == std::numeric_limits<int>::min() ? "integer" : "integer >= " + std::to_string(min);
  }
  int read(const Value& v) const {
    const auto* i = v.node.as_integer();
    if (i == nullptr) v.fail("expected an integer");
    if (i->get() < min) v.fail("must be at least " + std::to_string(min));
    if (i->get() > std::numeric_limits<int>::max()) v.fail("is too large");
    return static_cast<int>(i->get());
  }
  std::string write(int value) const { return std::to_string(value); }
};

// Unsigned 64-bit: TOML integers stop at 2^63 - 1, so larger values are written as digit strings.
struct UInt64Codec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::string type() const { return "integer >= 0"; }
  std::uint64_t read(const Value& v) const {
    if (const auto* i = v.node.as_integer()) {
      if (i->get() < 0) v.fail("must not be negative");
      return static_cast<std::uint64_t>(i->get());
    }
    if (const auto* s = v.node.as_string()) {
      std::uint64_t value = 0;
      const std::string& text = s->get();
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec == std::errc{} && end == text.data() + text.size() && !text.empty()) return value;
    }
    v.fail("expected a non-negative integer");
  }
  std::string write(std::uint64_t value) const {
    const std::string digits = std::to_string(value);
    return value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? quote_string(digits)
                                                                                        : digits;
  }
};

struct BoolCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::string type() const { return "boolean"; }
  bool read(const Value& v) const {
    if (const auto* b = v.node.as_boolean()) return b->get();
    v.fail("expected true or false");
  }
  std::string write(bool value) const { return value ? "true" : "false"; }
};

// A plain number without unit (factors, tolerances).
struct RealCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  double min = 0;
  std::string type() const { return "number >= " + units::format_number(min); }
  double read(const Value& v) const {
    double value = 0;
    if (const auto* i = v.node.as_integer()) {
      value = static_cast<double>(i->get());
    } else if (const auto* f = v.node.as_floating_point(); f != nullptr && std::isfinite(f->get())) {
      value = f->get();
    } else {
      v.fail("expected a number");
    }
    if (value < min) v.fail("must be at least " + units::format_number(min));
    return value;
  }
  std::string write(double value) const { return units::format_number(value); }
};

std::string_view quantity_name(Quantity quantity) {
  switch (quantity) {
    case Quantity::kSize:
      return "size";
    case Quantity::kBandwidth:
      return "bandwidth";
    case Quantity::kDuration:
      return "duration";
    case Quantity::kFlops:
      return "speed";
  }
  return "";
}

std::string unreadable(Quantity quantity) {
  switch (quantity) {
    case Quantity::kSize:
      return "cannot read a size; write e.g. \"4MB\", \"4MiB\", \"512B\" or a number of bytes";
    case Quantity::kBandwidth:
      return "cannot read a bandwidth; write e.g. \"10Gbps\", \"1.25GBps\" or a number of bytes per second";
    case Quantity::kDuration:
      return "cannot read a duration; write e.g. \"5us\", \"2ms\", \"1.5s\" or a number of seconds";
    case Quantity::kFlops:
      return "cannot read a speed; write e.g. \"100Gf\", \"1.5Tf\" or a number of flops";
  }
  return "";
}

// Bandwidths, durations and speeds: stored as doubles in base units.
struct QuantityCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  Quantity quantity;
  bool positive = false;
  std::string type() const {
    const std::string name = quantity == Quantity::kFlops ? "flops" : std::string(quantity_name(quantity));
    return positive ? name + " > 0" : name;
  }
  double read(const Value& v) const {
    double value = 0;
    if (const auto* s = v.node.as_string()) {
      const auto parsed = units::parse_real(quantity, s->get());
      if (parsed.status == ParseStatus::kNegative) v.fail("must not be negative");
      if (parsed.status == ParseStatus::kOutOfRange) v.fail("is out of range");
      if (parsed.status != ParseStatus::kOk) v.fail(unreadable(quantity));
      value = parsed.value;
    } else if (const auto* i = v.node.as_integer()) {
      value = static_cast<double>(i->get());
    } else if (const auto* f = v.node.as_floating_point(); f != nullptr && std::isfinite(f->get())) {
      value = f->get();
    } else {
      v.fail(unreadable(quantity));
    }
    if (value < 0) v.fail("must not be negative");
    if (positive && value == 0) v.fail("must be greater than 0");
    return value;
  }
  std::string write(double value) const { return units::format_real(quantity, value); }
};

std::uint64_t read_size(const Value& v) {
  if (const auto* s = v.node.as_string()) {
    const auto parsed = units::parse_size(s->get());
    switch (parsed.status) {
      case ParseStatus::kOk:
        return parsed.value;
      case ParseStatus::kNegative:
        v.fail("must not be negative");
      case ParseStatus::kNotWhole:
        v.fail("is not a whole number of bytes");
      case ParseStatus::kOutOfRange:
        v.fail("is out of range");
      case ParseStatus::kSyntax:
        break;
    }
  } else if (const auto* i = v.node.as_integer()) {
    if (i->get() < 0) v.fail("must not be negative");
    return static_cast<std::uint64_t>(i->get());
  } else if (const auto* f = v.node.as_floating_point()) {
    const double value = f->get();
    if (value < 0) v.fail("must not be negative");
    if (!std::isfinite(value) || value >= 0x1p64) v.fail("is out of range");
    if (value != std::floor(value)) v.fail("is not a whole number of bytes");
    return static_cast<std::uint64_t>(value);
  }
  v.fail(unreadable(Quantity::kSize));
}

struct SizeCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::uint64_t min = 0;
  std::uint64_t multiple = 1;
  std::string type() const {
    std::string text = "size";
    if (min > 0) text += " >= " + std::to_string(min) + "B";
    if (multiple > 1) text += ", multiple of " + std::to_string(multiple) + "B";
    return text;
  }
  std::uint64_t read(const Value& v) const {
    const std::uint64_t value = read_size(v);
    if (value < min) v.fail("must be at least " + std::to_string(min) + " bytes");
    if (value % multiple != 0) {
      v.fail("must be a multiple of " + std::to_string(multiple) + " bytes (float32 elements); e.g. " +
             units::format_size(value - value % multiple));
    }
    return value;
  }
  std::string write(std::uint64_t value) const { return units::format_size(value); }
};

// Tensor sizes: each a positive multiple of 4 bytes (float32 elements).
struct TensorSizesCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = true;
  std::string type() const { return "array of sizes (each > 0, multiple of 4B)"; }
  std::vector<std::uint64_t> read(const Value& v) const {
    const auto* array = v.node.as_array();
    if (array == nullptr) v.fail("expected an array of sizes, e.g. [\"4MB\", \"1MB\", 4096]");
    std::vector<std::uint64_t> sizes;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const Value element = v.element(i, *array->get(i));
      const std::uint64_t size = read_size(element);
      if (size == 0 || size % 4 != 0) {
        element.fail("a tensor must be a positive multiple of 4 bytes (float32 elements); e.g. " +
                     units::format_size(std::max<std::uint64_t>(4, size - size % 4)));
      }
      sizes.push_back(size);
    }
    return sizes;
  }
  std::string write(const std::vector<std::uint64_t>& sizes) const {
    std::vector<std::string> items;
    for (const auto size : sizes) items.push_back(units::format_size(size));
    return "[" + join(items, ", ") + "]";
  }
};

// An array of integers >= min: layer widths (min 1), worker ranks (min 0).
struct CountListCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = true;
  std::int64_t min = 1;
  std::string_view example = "[784, 256, 128, 10]";
  std::string type() const { return "array of integers >= " + std::to_string(min); }
  std::vector<std::uint64_t> read(const Value& v) const {
    const auto* array = v.node.as_array();
    if (array == nullptr) v.fail("expected an array of integers, e.g. " + std::string(example));
    std::vector<std::uint64_t> counts;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const Value element = v.element(i, *array->get(i));
      const auto* n = element.node.as_integer();
      if (n == nullptr || n->get() < min) element.fail("expected an integer >= " + std::to_string(min));
      counts.push_back(static_cast<std::uint64_t>(n->get()));
    }
    return counts;
  }
  std::string write(const std::vector<std::uint64_t>& counts) const {
    std::vector<std::string> items;
    for (const auto n : counts) items.push_back(std::to_string(n));
    return "[" + join(items, ", ") + "]";
  }
};

// An array of strings; `item` names what one element is, for messages and docs.
struct StringListCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = true;
  std::string_view item = "string";
  std::string_view example = "[\"a\", \"b\"]";
  std::string type() const { return "array of " + std::string(item) + "s"; }
  std::vector<std::string> read(const Value& v) const {
    const auto* array = v.node.as_array();
    if (array == nullptr)
      v.fail("expected an array of " + std::string(item) + "s, e.g. " + std::string(example));
    std::vector<std::string> items;
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      if (!element.is_string()) v.element(i, element).fail("expected a " + std::string(item) + " string");
      items.push_back(element.as_string()->get());
    }
    return items;
  }
  std::string write(const std::vector<std::string>& items) const {
    std::vector<std::string> quoted;
    for (const auto& item_text : items) quoted.push_back(quote_string(item_text));
    return "[" + join(quoted, ", ") + "]";
  }
};
const StringListCodec kHostList{"host name", "[\"h1\", \"h2\"]"};

// [cluster.links.<host>]: bandwidth and latency; a missing one takes the host default.
struct LinksCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::string type() const { return "table: host -> { bandwidth, latency }"; }
  std::map<std::string, LinkSpec> read(const Value& v) const {
    const auto* table = v.node.as_table();
    if (table == nullptr)
      v.fail("expected a table of hosts, e.g. [cluster.links.h1] with bandwidth = \"1Gbps\"");
    std::map<std::string, LinkSpec> links;
    for (const auto& [key, node] : *table) {
      const Value host = v.member(key.str(), node);
      const auto* fields = node.as_table();
      if (fields == nullptr) host.fail("expected a table with bandwidth and/or latency");
      LinkSpec spec{v.scenario.cluster.host_bandwidth_Bps, v.scenario.cluster.host_latency_s};
      if (const auto* bw = fields->get(kLinkKeys[0])) {
        spec.bandwidth_Bps = QuantityCodec{Quantity::kBandwidth, true}.read(host.member(kLinkKeys[0], *bw));
      }
      if (const auto* lat = fields->get(kLinkKeys[1])) {
        spec.latency_s = QuantityCodec{Quantity::kDuration, false}.read(host.member(kLinkKeys[1], *lat));
      }
      links.emplace(std::string(key.str()), spec);
    }
    return links;
  }
  std::string write(const std::map<std::string, LinkSpec>& links) const {
    if (links.empty()) return "{}";
    std::vector<std::string> items;
    for (const auto& [host, spec] : links) {
      items.push_back(toml_key(host) +
                      " = { bandwidth = " + units::format_real(Quantity::kBandwidth, spec.bandwidth_Bps) +
                      ", latency = " + units::format_real(Quantity::kDuration, spec.latency_s) + " }");
    }
    return "{ " + join(items, ", ") + " }";
  }
};

// A probability of a fault per message: a number in [0, 1) (1 would lose or double everything).
struct ProbabilityCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::string type() const { return "number in [0, 1)"; }
  double read(const Value& v) const {
    const double value = RealCodec{0}.read(v);
    if (value >= 1) v.fail("must be below 1 (a probability per message), e.g. 0.05");
    return value;
  }
  std::string write(double value) const { return units::format_number(value); }
};

// The members of one inline table of a fault list, each read once; an unknown key is refused.
class FaultEntry {
 public:
  FaultEntry(const Value& v, std::span<const std::string_view> keys, std::string_view example)
      : v_(v), keys_(keys) {
    table_ = v.node.as_table();
    if (table_ == nullptr) v.fail("expected a table, e.g. " + std::string(example));
    for (const auto& [key, node] : *table_)
      if (std::find(keys.begin(), keys.end(), key.str()) == keys.end())
        v.member(key.str(), node)
            .fail("unknown key; a " + std::string(leaf_of(v.path.substr(0, v.path.find('[')))) +
                  " entry has " + choices_text(keys));
  }
  const toml::node* get(std::string_view key) const { return table_->get(key); }
  Value member(std::string_view key) const { return v_.member(key, *table_->get(key)); }
  double duration(std::string_view key, std::optional<double> fallback, bool positive = false) const {
    if (get(key) == nullptr) {
      if (!fallback) v_.fail("needs " + std::string(key) + " (a duration, e.g. \"1s\")");
      return *fallback;
    }
    return QuantityCodec{Quantity::kDuration, positive}.read(member(key));
  }
  FaultSide side() const {
    FaultSide out;
    const bool hosts = get("hosts") != nullptr, nodes = get("nodes") != nullptr;
    if (hosts == nodes) v_.fail("needs exactly one of hosts = [\"h1\", ...] or nodes = [\"worker 1\", ...]");
    if (hosts) out.hosts = StringListCodec{"host name", "[\"h1\"]"}.read(member("hosts"));
    if (nodes) out.nodes = StringListCodec{"node name", "[\"worker 1\"]"}.read(member("nodes"));
    if (out.hosts.empty() && out.nodes.empty())
      v_.fail("names no host or node; list at least one, e.g. hosts = [\"h1\"]");
    return out;
  }

 private:
  const Value& v_;
  std::span<const std::string_view> keys_;
  const toml::table* table_ = nullptr;
};

std::string write_side(const FaultSide& side) {
  const auto& list = side.hosts.empty() ? side.nodes : side.hosts;
  return std::string(side.hosts.empty() ? "nodes = " : "hosts = ") + StringListCodec{}.write(list);
}

std::string duration_text(double seconds) {
  return units::format_real(Quantity::kDuration, seconds);
}

// An array of inline tables, one fault each: `Entry` reads one (FaultEntry) and writes one.
template <typename T, typename Reader, typename Writer>
struct FaultListCodec {
  static constexpr bool kWantsString = false;
  static constexpr bool kIsList = false;
  std::string_view description;
  std::string_view example;
  Reader read_one;
  Writer write_one;
  std::string type() const { return "array of tables " + std::string(description); }
  std::vector<T> read(const Value& v) const {
    const auto* array = v.node.as_array();
    if (array == nullptr) v.fail("expected an array of tables, e.g. [" + std::string(example) + "]");
    std::vector<T> items;
    for (std::size_t i = 0; i < array->size(); ++i) items.push_back(read_one(v.element(i, *array->get(i))));
    return items;
  }
  std::string write(const std::vector<T>& items) const {
    std::vector<std::string> texts;
    for (const auto& item : items) texts.push_back("{ " + write_one(item) + " }");
    return "[" + join(texts, ", ") + "]";
  }
};
template <typename T, typename Reader, typename Writer>
FaultListCodec<T, Reader, Writer> fault_list(std::string_view description, std::string_view example,
                                             Reader reader, Writer writer) {
  return {description, example, reader, writer};
}

constexpr std::array<std::string_view, 4> kPartitionKeys{"hosts", "nodes", "from", "until"};
constexpr std::array<std::string_view, 4> kClogKeys{"hosts", "nodes", "from", "duration"};
constexpr std::array<std::string_view, 4> kSlowKeys{"node", "factor", "from", "until"};
constexpr std::string_view kPartitionExample = "{ hosts = [\"h1\"], from = \"1s\", until = \"2s\" }";
constexpr std::string_view kClogExample = "{ nodes = [\"server 0\"], from = \"1s\", duration = \"50ms\" }";
constexpr std::string_view kSlowExample =
    "{ node = \"worker 1\", factor = 3, from = \"0s\", until = \"2s\" }";
constexpr std::array<std::string_view, 3> kCrashKeys{"node", "at", "iteration"};
constexpr std::string_view kCrashExample = "{ node = \"worker 1\", at = \"2s\" }";
constexpr std::array<std::string_view, 3> kMessageClasses{"all", "control", "data"};
constexpr std::array<std::string_view, 2> kWorkerLossPolicies{"fail", "continue"};

PartitionFault read_partition(const Value& v) {
  const FaultEntry e(v, kPartitionKeys, kPartitionExample);
  return {e.side(), e.duration("from", 0.0), e.duration("until", std::nullopt)};
}
std::string write_partition(const PartitionFault& p) {
  return write_side(p.side) + ", from = " + duration_text(p.from_s) + ", until = " + duration_text(p.until_s);
}
ClogFault read_clog(const Value& v) {
  const FaultEntry e(v, kClogKeys, kClogExample);
  return {e.side(), e.duration("from", 0.0), e.duration("duration", std::nullopt, /*positive=*/true)};
}
std::string write_clog(const ClogFault& c) {
  return write_side(c.side) + ", from = " + duration_text(c.from_s) +
         ", duration = " + duration_text(c.duration_s);
}
SlowFault read_slow(const Value& v) {
  const FaultEntry e(v, kSlowKeys, kSlowExample);
  SlowFault slow;
  if (e.get("node") == nullptr) v.fail("needs node = \"worker 1\" (a node name as in results.json)");
  slow.node = StringCodec{}.read(e.member("node"));
  if (e.get("factor") == nullptr) v.fail("needs factor, how many times longer its tasks take, e.g. 3");
  slow.factor = RealCodec{0}.read(e.member("factor"));
  if (!(slow.factor >= 1)) e.member("factor").fail("must be at least 1 (1: no slowdown), e.g. 3");
  slow.from_s = e.duration("from", 0.0);
  slow.until_s = e.duration("until", std::numeric_limits<double>::infinity());
  return slow;
}
std::string write_slow(const SlowFault& s) {
  std::string text = "node = " + quote_string(s.node) + ", factor = " + units::format_number(s.factor) +
                     ", from = " + duration_text(s.from_s);
  if (std::isfinite(s.until_s)) text += ", until = " + duration_text(s.until_s);
  return text;
}

CrashFault read_crash(const Value& v) {
  const FaultEntry e(v, kCrashKeys, kCrashExample);
  CrashFault crash;
  if (e.get("node") == nullptr) v.fail("needs node = \"worker 1\" (a node name as in results.json)");
  crash.node = StringCodec{}.read(e.member("node"));
  const bool at = e.get("at") != nullptr, iteration = e.get("iteration") != nullptr;
  if (at == iteration)
    v.fail(
        "needs exactly one of at = \"2s\" (a simulated time) or iteration = 3 (a worker, as it starts it)");
  if (at) crash.at_s = e.duration("at", std::nullopt);
  if (iteration) {
    const auto value = e.member("iteration");
    const auto* integer = value.node.as_integer();
    if (integer == nullptr || integer->get() < 0 ||
        integer->get() > std::numeric_limits<std::uint32_t>::max())
      value.fail("expected an iteration number, 0 or more, e.g. 3");
    crash.iteration = static_cast<std::uint32_t>(integer->get());
  }
  return crash;
}
std::string write_crash(const CrashFault& c) {
  return "node = " + quote_string(c.node) +
         (c.at_s ? ", at = " + duration_text(*c.at_s) : ", iteration = " + std::to_string(*c.iteration));
}

// ---------------------------------------------------------------------------------------------
// The registry

struct Field {
  std::string_view path;
  std::string_view doc;
  std::string type;
  bool wants_string = false;  // --set values that are not TOML strings are taken as text
  bool is_list = false;       // --set values that are not TOML arrays are split on commas
  std::function<void(const Value&, Scenario&)> read;
  std::function<std::string(const Scenario&)> write;
};

// `access` is a generic lambda returning the member, so one accessor serves reading and writing.
template <typename Codec, typename Access>
Field make_field(std::string_view path, Access access, Codec codec, std::string_view doc) {
  return Field{
      .path = path,
      .doc = doc,
      .type = codec.type(),
      .wants_string = Codec::kWantsString,
      .is_list = Codec::kIsList,
      .read = [access, codec](const Value& v, Scenario& s) { access(s) = codec.read(v); },
      .write = [access, codec](const Scenario& s) { return codec.write(access(s)); },
  };
}

#define PSTWIN_MEMBER(member) \
  [](auto& s) -> auto& {      \
    return s.member;          \
  }

std::vector<Field> make_registry() {
  const auto bandwidth = QuantityCodec{Quantity::kBandwidth, true};
  const auto duration = QuantityCodec{Quantity::kDuration, false};
  const auto positive_duration = QuantityCodec{Quantity::kDuration, true};
  std::vector<Field> f;
  // Top level
  f.push_back(
      make_field("name", PSTWIN_MEMBER(name), StringCodec{}, "Name of the scenario, shown in reports."));
  f.push_back(make_field("description", PSTWIN_MEMBER(description), StringCodec{}, "Free-text description."));
  f.push_back(make_field("seed", PSTWIN_MEMBER(seed), UInt64Codec{},
                         "Seed of every random stream (jitter, payload data): same seed, same run."));
  // [cluster]
  f.push_back(make_field("cluster.topology", PSTWIN_MEMBER(cluster.topology),
                         EnumCodec<Topology>{kTopologyNames},
                         "`star`: every host on one switch; `two-tier`: hosts spread round-robin over racks, "
                         "each rack linked to a core switch by an uplink."));
  f.push_back(make_field("cluster.hosts", PSTWIN_MEMBER(cluster.hosts), IntCodec{0},
                         "Number of hosts, named h0..h{N-1}; 0: one host per node (1 scheduler + servers + "
                         "workers)."));
  f.push_back(make_field("cluster.host_bandwidth", PSTWIN_MEMBER(cluster.host_bandwidth_Bps), bandwidth,
                         "Bandwidth of every host's NIC, full duplex."));
  f.push_back(make_field("cluster.host_latency", PSTWIN_MEMBER(cluster.host_latency_s), duration,
                         "Latency of every host's link."));
  f.push_back(make_field("cluster.host_speed", PSTWIN_MEMBER(cluster.host_speed_flops),
                         QuantityCodec{Quantity::kFlops, true}, "Compute speed of one core."));
  f.push_back(
      make_field("cluster.host_cores", PSTWIN_MEMBER(cluster.host_cores), IntCodec{1}, "Cores per host."));
  f.push_back(make_field(
      "cluster.switch_bandwidth", PSTWIN_MEMBER(cluster.switch_bandwidth_Bps),
      QuantityCodec{Quantity::kBandwidth, false},
      "`star` only: capacity of the switch, shared by every message between two hosts (a link named `switch` "
      "in `links`); 0: non-blocking. A namespace cluster's switch is this machine's CPU forwarding frames "
      "through veths, bridge and tbf: docs/FIDELITY.md measures it."));
  f.push_back(make_field("cluster.racks", PSTWIN_MEMBER(cluster.racks), IntCodec{0},
                         "`two-tier` only (and then at least 1): number of racks; hosts go round-robin over "
                         "them."));
  f.push_back(make_field("cluster.rack_uplink_bandwidth", PSTWIN_MEMBER(cluster.rack_uplink_bandwidth_Bps),
                         bandwidth, "`two-tier` only: bandwidth of each rack's uplink."));
  f.push_back(make_field("cluster.rack_uplink_latency", PSTWIN_MEMBER(cluster.rack_uplink_latency_s),
                         duration, "`two-tier` only: latency of each rack's uplink."));
  f.push_back(make_field(
      "cluster.pcie_bandwidth", PSTWIN_MEMBER(cluster.pcie_bandwidth_Bps), bandwidth,
      "workload.device = \"cuda\": speed of each worker's copies between its GPU and host memory (the "
      "copy-in device -> host into the staging buffer, each pulled aggregate host -> device), charged on "
      "the worker's copy lane by the simulator; the real backend's copies take what the bus gives. 12 GB/s "
      "is what pinned copies reach on PCIe 4.0 x16 in practice (about 25 GB/s on PCIe 5.0)."));
  f.push_back(make_field(
      "cluster.intra_host_bandwidth", PSTWIN_MEMBER(cluster.intra_host_bandwidth_Bps), bandwidth,
      "ps.local_reduce: speed of the copies between the workers of one host (the root reading each other "
      "worker's staged partition, writing the pulled aggregate back, each worker reading it; with `nccl` "
      "each reduce and broadcast between the host's GPUs), charged by the simulator on the workers' copy, "
      "reduce and collective lanes; the real backend's copies take what the memory or the GPU links give. "
      "16 GB/s is PCIe-like (host shared memory between GPUs' staging buffers); NVLink is about 100GB/s."));
  f.push_back(make_field("cluster.links", PSTWIN_MEMBER(cluster.host_links), LinksCodec{},
                         "Per-host link overrides, written as tables `[cluster.links.h3]` with `bandwidth` "
                         "and/or `latency`; a missing one takes cluster.host_bandwidth / "
                         "cluster.host_latency."));
  // [roles]
  f.push_back(make_field("roles.servers", PSTWIN_MEMBER(roles.servers), IntCodec{1}, "Number of servers."));
  f.push_back(make_field("roles.workers", PSTWIN_MEMBER(roles.workers), IntCodec{1}, "Number of workers."));
  f.push_back(make_field("roles.scheduler_host", PSTWIN_MEMBER(roles.scheduler_host), StringCodec{},
                         "Host of the scheduler; empty: h0."));
  f.push_back(make_field("roles.server_hosts", PSTWIN_MEMBER(roles.server_hosts), kHostList,
                         "Server r runs on list[r % size]; empty: on h{(1 + r) % hosts}."));
  f.push_back(make_field("roles.worker_hosts", PSTWIN_MEMBER(roles.worker_hosts), kHostList,
                         "Worker r runs on list[r % size]; empty: on h{(1 + servers + r) % hosts}."));
  f.push_back(make_field("roles.validators", PSTWIN_MEMBER(roles.validators), IntCodec{0},
                         "ZenoPS validators (workload.kind = \"mlp\"): servers route each push to validator "
                         "(worker rank % validators), which scores it with zeno.rule on its held-out shard; "
                         "0: servers apply zeno.rule themselves, per key."));
  f.push_back(make_field("roles.validator_hosts", PSTWIN_MEMBER(roles.validator_hosts), kHostList,
                         "Validator r runs on list[r % size]; empty: on h{(1 + servers + workers + r) % "
                         "hosts}."));
  // [ps]
  f.push_back(make_field("ps.mode", PSTWIN_MEMBER(ps.mode), EnumCodec<TrainingMode>{kModeNames},
                         "`sync`: each iteration aggregates every worker's push before anyone pulls; "
                         "`async`: servers apply each push as it arrives."));
  f.push_back(make_field(
      "ps.partition_bytes", PSTWIN_MEMBER(ps.partition_bytes), SizeCodec{4, 4},
      "Tensors are split into partitions of at most this size (BYTEPS_PARTITION_BYTES). With ps.balancing "
      "= \"lb\" and the field left out: chosen from the cluster's links (docs/FPT.md)."));
  f.push_back(make_field("ps.key_hash", PSTWIN_MEMBER(ps.key_hash), EnumCodec<KeyHash>{kKeyHashNames},
                         "Hash that assigns partition keys to servers (BYTEPS_KEY_HASH_FN)."));
  f.push_back(make_field("ps.server_engine_threads", PSTWIN_MEMBER(ps.server_engine_threads), IntCodec{1},
                         "Summation threads per server (BYTEPS_SERVER_ENGINE_THREAD)."));
  f.push_back(make_field(
      "ps.scheduling_credit", PSTWIN_MEMBER(ps.scheduling_credit), IntCodec{0},
      "Partitions a worker may have pushed and not yet acknowledged (BYTEPS_SCHEDULING_CREDIT); "
      "0: no limit, so pull requests queue behind every remaining push. With ps.balancing = \"lb\": per "
      "server, and where left out chosen from the links' bandwidth-delay product (docs/FPT.md)."));
  f.push_back(make_field(
      "ps.priority_scheduling", PSTWIN_MEMBER(ps.priority_scheduling), BoolCodec{},
      "Earlier tensors first (BytePS/ByteScheduler priorities: tensor t has priority -t) in the worker's "
      "credit queue and on the wire; false: one priority, pushes leave in the order they were staged."));
  f.push_back(make_field(
      "ps.push_pull", PSTWIN_MEMBER(ps.push_pull), EnumCodec<PushPullMode>{kPushPullNames},
      "`separate`: push, then pull once the push is acknowledged (BytePS); `fused`: one push_pull request "
      "whose reply carries the aggregate (ps-lite's ZPushPull): one round trip per partition instead of "
      "two. Left out: fused, unless the job has validators (separate)."));
  f.push_back(make_field(
      "ps.local_reduce", PSTWIN_MEMBER(ps.local_reduce), EnumCodec<LocalReduce>{kLocalReduceNames},
      "BytePS's hierarchical mode. `none`: every worker pushes and pulls. `shm`: the workers of one host "
      "(roles.worker_hosts) hand each partition to the host's lowest-ranked worker through host shared "
      "memory; it sums them by rank, pushes and pulls for the host (servers expect one push per host), "
      "and hands the aggregate back the same way. `nccl`: the same between the host's GPUs (needs "
      "workload.device = \"cuda\"): the host's workers reduce each partition into the root's GPU with "
      "NCCL, the root copies it to host memory and pushes, and broadcasts the pulled aggregate back to "
      "their GPUs; refused by builds without NCCL. Needs ps.mode = \"sync\" and workload.kind = "
      "\"synthetic\"."));
  f.push_back(make_field("ps.heartbeat_interval", PSTWIN_MEMBER(ps.heartbeat_interval_s), positive_duration,
                         "Time between a node's heartbeats to the scheduler."));
  f.push_back(make_field("ps.heartbeat_timeout", PSTWIN_MEMBER(ps.heartbeat_timeout_s), positive_duration,
                         "A node silent this long counts as dead; must exceed ps.heartbeat_interval."));
  f.push_back(make_field("ps.connect_timeout", PSTWIN_MEMBER(ps.connect_timeout_s), positive_duration,
                         "How long a node waits for the scheduler's node table."));
  f.push_back(Field{
      .path = "ps.resend",
      .doc = "Acknowledge every message and resend it until acknowledged; receivers drop duplicates by "
             "(sender, sequence) (ps-lite's Resender, docs/FAULTS.md). Default: on when faults.loss, "
             "faults.duplicate or faults.partitions is set, else off.",
      .type = "boolean",
      .read = [](const Value& v, Scenario& s) { s.ps.resend = BoolCodec{}.read(v); },
      .write = [](const Scenario& s) { return BoolCodec{}.write(s.resend_enabled()); },
  });
  f.push_back(make_field("ps.resend_timeout", PSTWIN_MEMBER(ps.resend_timeout_s), positive_duration,
                         "With ps.resend: resend a message not acknowledged this long after it was sent, "
                         "and again every as long; a message unacknowledged for ps.heartbeat_timeout fails "
                         "the run."));
  f.push_back(make_field(
      "ps.on_worker_loss", PSTWIN_MEMBER(ps.on_worker_loss), ChoiceCodec{kWorkerLossPolicies},
      "When the scheduler declares a worker dead (silent for ps.heartbeat_timeout): \"fail\" ends the job "
      "naming it; \"continue\" goes on with the survivors: open and later rounds complete with their "
      "pushes (the mean over them), what the lost worker pushed before counts once. A lost server or "
      "scheduler always fails the job."));
  f.push_back(make_field(
      "ps.require_token", PSTWIN_MEMBER(ps.require_token), BoolCodec{},
      "Real runs: `pstwin node` refuses to start without PSTWIN_JOB_TOKEN, the job's secret with which "
      "every connection proves it belongs to the job (docs/SECURITY.md); false: a node without one runs "
      "unauthenticated and says so. `pstwin run` always makes one per job."));
  f.push_back(make_field(
      "ps.require_encryption", PSTWIN_MEMBER(ps.require_encryption), BoolCodec{},
      "Real runs: refuse to start unencrypted. `pstwin node` exits 2 without PSTWIN_ENCRYPT=curve, "
      "`pstwin run` and `pstwin launch` without --encrypt curve (ZeroMQ CURVE on the zmq van, keys from "
      "the job token; docs/SECURITY.md); false: encryption is the launcher's choice and each node says "
      "whether its traffic is encrypted."));
  // Load balancing (FPT's LBScheduler): ps.balancing and [lb]
  f.push_back(make_field("ps.balancing", PSTWIN_MEMBER(lb.balancing), EnumCodec<Balancing>{kBalancingNames},
                         "`hash`: ps.key_hash assigns partitions to servers (BytePS); `lb`: the scheduler "
                         "measures each server's bandwidth and gives it a share of every tensor in "
                         "proportion (docs/FPT.md); sync mode only."));
  f.push_back(make_field(
      "ps.backup_workers", PSTWIN_MEMBER(ps.backup_workers), IntCodec{0},
      "Sync backup workers (Chen et al., \"Revisiting distributed synchronous SGD\"): each round completes "
      "with "
      "the first roles.workers - b pushes of a key, so b stragglers cost nothing; a late push is dropped, "
      "acknowledged (a fused one answered with the aggregate) and counted in results.json `late_pushes`. 0: "
      "every push."));
  f.push_back(make_field("ps.max_staleness", PSTWIN_MEMBER(ps.max_staleness), IntCodec{0},
                         "Async bounded staleness: a server refuses (acknowledges, never applies) a push "
                         "whose key had more than this many updates applied since the worker last pulled it; "
                         "counts in results.json `staleness`. 0: unbounded."));
  f.push_back(make_field("lb.probe_at", PSTWIN_MEMBER(lb.probe_at), CountListCodec{0},
                         "`lb`: iterations run in the probe state (equal split, bandwidths measured) on "
                         "request; iteration 0 always is, and so is any after a missing or zero "
                         "measurement."));
  f.push_back(make_field("lb.rebalance_threshold", PSTWIN_MEMBER(lb.rebalance_threshold), RealCodec{0},
                         "`lb`: a new decision replaces the one in force only if it is predicted to be "
                         "this fraction faster (0.02: 2 %), so measurement noise does not churn versions."));
  f.push_back(make_field(
      "lb.server_equal_shares", PSTWIN_MEMBER(lb.server_equal_shares), BoolCodec{},
      "`lb`: where the workers' NICs differ, each server holds every worker's connection, both ways, to "
      "an equal share of its NIC (the send pool's pacing and the receive side's shaping: the epoll van "
      "with PSTWIN_NIC_RATE, the simulator with its send pool and sim.network_model = \"flow\"). Every "
      "worker brings a server the same bytes and each key waits for all of them, so a worker ahead of "
      "its share gains nothing and takes the link from one the link's sharing gives less (docs/FPT.md)."));
  f.push_back(make_field("lb.missing_measurements", PSTWIN_MEMBER(lb.missing_measurements), CountListCodec{0},
                         "Fault injection, `lb`: in these iterations servers report no measurement (a "
                         "failed monitor); the scheduler must fall back to the probe state."));
  f.push_back(make_field("lb.worker_aggregators", PSTWIN_MEMBER(lb.worker_aggregators), BoolCodec{},
                         "`lb`: workers aggregate ranges of keys as well as the servers (BytePS's colocated "
                         "servers): the scheduler splits each tensor between servers and workers by the "
                         "measured bandwidths (docs/FPT.md); iteration 1 probes the workers. Synthetic "
                         "workloads, 3 or more workers, no validators."));
  // [workload]
  f.push_back(make_field("workload.tensor_bytes", PSTWIN_MEMBER(workload.tensor_bytes), TensorSizesCodec{},
                         "Declared tensors in layer order (earlier = higher priority). If neither this nor "
                         "workload.model_bytes is set: [\"4MB\", \"1MB\", \"256KB\", \"64KB\"]."));
  f.push_back(
      make_field("workload.model_bytes", PSTWIN_MEMBER(workload.model_bytes), SizeCodec{},
                 "Instead of tensor_bytes: total model size (rounded down to a multiple of 4B), split "
                 "into workload.tensors nearly equal tensors."));
  f.push_back(make_field("workload.tensors", PSTWIN_MEMBER(workload.tensors), IntCodec{0},
                         "Number of tensors workload.model_bytes is split into; only with model_bytes."));
  f.push_back(make_field("workload.compute", PSTWIN_MEMBER(workload.compute_s), duration,
                         "Compute time per iteration, before pushing."));
  f.push_back(make_field("workload.iterations", PSTWIN_MEMBER(workload.iterations), IntCodec{1},
                         "Training iterations."));
  f.push_back(make_field(
      "workload.layerwise", PSTWIN_MEMBER(workload.layerwise), BoolCodec{},
      "Split each iteration's compute per tensor (shares by bytes): forward of tensor t starts once its "
      "pull is in, so the next iteration begins before the whole model arrives; backward runs in reverse "
      "and each tensor is pushed as soon as its backward ends. false: compute, then push everything."));
  f.push_back(make_field("workload.forward_share", PSTWIN_MEMBER(workload.forward_share), RealCodec{0},
                         "With workload.layerwise: the forward pass's share of an iteration's compute, in "
                         "(0, 1); the rest is the backward pass."));
  f.push_back(make_field("workload.payload", PSTWIN_MEMBER(workload.payload),
                         EnumCodec<PayloadMode>{kPayloadNames},
                         "`real`: messages carry float32 data that servers really sum; `phantom`: messages "
                         "carry sizes only."));
  f.push_back(make_field(
      "workload.device", PSTWIN_MEMBER(workload.device), EnumCodec<DeviceKind>{kDeviceNames},
      "Where each worker keeps its tensors: `cpu` (host memory, the copy-in is a memcpy at "
      "staging.copy_bandwidth) or `cuda` (GPU memory: the copy-in is a device -> host copy into the pinned "
      "staging buffer and each pulled aggregate goes back host -> device, at cluster.pcie_bandwidth in the "
      "simulator). With workload.kind = \"mlp\", `cuda` runs each worker's MLP step (forward, loss, "
      "gradient) on its GPU with cuBLAS and copies the gradient back to host memory; the simulator computes "
      "the same step on the CPU. `cuda` needs a build with CUDA (PSTWIN_CUDA) and, for the synthetic "
      "workload, staging.enabled; a real run also needs a GPU (worker r uses GPU r mod the GPUs visible). "
      "docs/HARDWARE.md."));
  f.push_back(make_field("workload.sum_bandwidth", PSTWIN_MEMBER(workload.sum_bandwidth_Bps), bandwidth,
                         "Server float32 summation speed (cost model)."));
  f.push_back(make_field("workload.kind", PSTWIN_MEMBER(workload.kind),
                         EnumCodec<WorkloadKind>{kWorkloadKindNames},
                         "`synthetic`: declared tensors filled with exactly checkable values; `mlp`: a real "
                         "MLP trained on Fashion-MNIST (see [train]); its tensors replace tensor_bytes and "
                         "model_bytes, its compute is FLOPs per step at cluster.host_speed (sim) or the real "
                         "step (real backend), and workload.compute is not used."));
  // [train]
  f.push_back(
      make_field("train.layers", PSTWIN_MEMBER(train.layers), CountListCodec{},
                 "workload.kind = \"mlp\": layer widths, input (784 for Fashion-MNIST) first, classes "
                 "(10) last; one PS key per weight and bias tensor, W1 first (highest priority)."));
  f.push_back(
      make_field("train.batch", PSTWIN_MEMBER(train.batch), IntCodec{1},
                 "Minibatch size per worker and iteration; at most the samples of a worker's shard."));
  f.push_back(make_field("train.learning_rate", PSTWIN_MEMBER(train.learning_rate), RealCodec{0},
                         "SGD learning rate (> 0), applied by the servers to the mean gradient."));
  f.push_back(make_field("train.momentum", PSTWIN_MEMBER(train.momentum), RealCodec{0},
                         "SGD momentum in [0, 1) (PyTorch's, dampening 0); each server keeps it per key."));
  f.push_back(make_field("train.weight_decay", PSTWIN_MEMBER(train.weight_decay), RealCodec{0},
                         "L2 weight decay added to the gradient."));
  f.push_back(make_field("train.sharding", PSTWIN_MEMBER(train.sharding),
                         EnumCodec<ShardingKind>{kShardingNames},
                         "How the 60,000 training images are split over workers: `iid` (equal random "
                         "shards) or `dirichlet` (per-class proportions ~ Dir(train.dirichlet_alpha))."));
  f.push_back(make_field("train.dirichlet_alpha", PSTWIN_MEMBER(train.dirichlet_alpha), RealCodec{0},
                         "Dirichlet concentration (> 0); small values give each worker few classes."));
  f.push_back(make_field("train.eval_every", PSTWIN_MEMBER(train.eval_every), IntCodec{0},
                         "Test accuracy on the 10,000 test images every this many iterations and at the "
                         "end (0: at the start and the end only); not charged to run time."));
  f.push_back(make_field("train.dataset", PSTWIN_MEMBER(train.dataset), StringCodec{},
                         "Directory of the Fashion-MNIST IDX files (Debian: dataset-fashion-mnist)."));
  f.push_back(make_field("train.lr_schedule", PSTWIN_MEMBER(train.lr_schedule), ChoiceCodec{kLrSchedules},
                         "`constant`, or `cosine`: from train.learning_rate at iteration 0 to learning_rate "
                         "* train.lr_final at workload.iterations (the iteration is the push's round tag)."));
  f.push_back(make_field("train.lr_final", PSTWIN_MEMBER(train.lr_final), RealCodec{0},
                         "`cosine` only: the last learning rate as a fraction of train.learning_rate."));
  // ZenoPS's experiment modes (docs/ZENO.md, "Modes").
  f.push_back(make_field("train.local_steps", PSTWIN_MEMBER(train.local_steps), IntCodec{1},
                         "Local SGD (ZenoPS's H): each worker takes this many plain SGD steps on its replica "
                         "per round and pushes the sum of their gradients (its model delta / -lr); a "
                         "validator's v is scaled to match. 1: one gradient, as before."));
  f.push_back(make_field("train.participation", PSTWIN_MEMBER(train.participation), RealCodec{0},
                         "Sync: each round round(participation * workers) workers (at least 1) push, drawn "
                         "from the seed's stream \"train.participation\"; the others only pull. 1: all."));
  f.push_back(make_field("train.drop_rate", PSTWIN_MEMBER(train.drop_rate), RealCodec{0},
                         "Sync: a participant skips pushing each tensor with this probability (stream "
                         "\"train.drop\"); it counts as a zero update and the worker keeps its unsent step "
                         "for one round, then resets it (ZenoPS's error reset). 0: every tensor pushed."));
  f.push_back(make_field("train.worker_momentum", PSTWIN_MEMBER(train.worker_momentum), BoolCodec{},
                         "Each worker keeps the momentum (train.momentum, train.weight_decay) and pushes its "
                         "momentum buffer; servers apply plain SGD to the mean. Same model undefended, "
                         "smaller honest variance for attacks to hide in (ALIE; docs/ZENO.md)."));
  // [zeno] and [attack]: ZenoPS robustness (docs/ZENO.md, docs/ROBUSTNESS.md)
  f.push_back(make_field(
      "zeno.rule", PSTWIN_MEMBER(zeno.rule), StringCodec{},
      "Aggregation rule: mean, median, trimmed-mean, krum, multi-krum, centered-clipping, "
      "zeno, zenops, zeno++, validation-only (docs/ZENO.md). zeno, zenops, zeno++ and validation-only "
      "need validators."));
  f.push_back(make_field("zeno.trim", PSTWIN_MEMBER(zeno.trim), IntCodec{0},
                         "trimmed-mean: values dropped at each end of every coordinate."));
  f.push_back(make_field("zeno.krum_byzantine", PSTWIN_MEMBER(zeno.krum_byzantine), IntCodec{0},
                         "krum, multi-krum: f, the Byzantine candidates tolerated (needs n >= 2f + 3)."));
  f.push_back(make_field("zeno.krum_select", PSTWIN_MEMBER(zeno.krum_select), IntCodec{1},
                         "multi-krum: m, the best candidates averaged."));
  f.push_back(
      make_field("zeno.clip_tau", PSTWIN_MEMBER(zeno.clip_tau), RealCodec{0},
                 "centered-clipping: radius (L2, gradient units); the centre is the last aggregate."));
  f.push_back(make_field("zeno.clip_iterations", PSTWIN_MEMBER(zeno.clip_iterations), IntCodec{1},
                         "centered-clipping: iterations L."));
  f.push_back(make_field("zeno.gamma", PSTWIN_MEMBER(zeno.gamma), RealCodec{0},
                         "zeno and zeno++: gamma, the trial step (learning-rate units)."));
  f.push_back(make_field("zeno.rho", PSTWIN_MEMBER(zeno.rho), RealCodec{-1},
                         "zeno: rho, loss per squared update norm; negative values favour longer updates "
                         "(measured in docs/ROBUSTNESS.md)."));
  f.push_back(make_field("zeno.drop", PSTWIN_MEMBER(zeno.drop), IntCodec{0},
                         "zeno: b, the lowest-scored candidates dropped per validator."));
  f.push_back(make_field("zeno.zenops_rho", PSTWIN_MEMBER(zeno.zenops_rho), RealCodec{-1},
                         "zenops: rho (dimensionless): accept needs <u,v> > rho ||v||^2; negative values "
                         "admit slightly opposed updates (ZenoPS swept -0.1 to 0.1)."));
  f.push_back(make_field("zeno.norm_bound", PSTWIN_MEMBER(zeno.norm_bound), RealCodec{0},
                         "zenops: c: accept needs ||u||^2 < c ||v||^2."));
  f.push_back(make_field("zeno.per_tensor", PSTWIN_MEMBER(zeno.per_tensor), BoolCodec{},
                         "zenops: score each tensor on its own (false: the whole model)."));
  f.push_back(make_field("zeno.local_steps", PSTWIN_MEMBER(zeno.local_steps), IntCodec{1},
                         "zenops and zeno++: H, local SGD steps of the validator's reference v (its mean "
                         "gradient over them)."));
  f.push_back(make_field("zeno.zenopp_rho", PSTWIN_MEMBER(zeno.zenopp_rho), RealCodec{0},
                         "zeno++: rho (learning-rate units)."));
  f.push_back(make_field("zeno.epsilon", PSTWIN_MEMBER(zeno.epsilon), RealCodec{0},
                         "zeno++: epsilon (squared gradient, summed over elements)."));
  f.push_back(make_field("zeno.scaling", PSTWIN_MEMBER(zeno.scaling), ChoiceCodec{kZenoScalings},
                         "zeno++: candidate scaled to ||v||: `rescale` always, `clip` only down, `none`."));
  f.push_back(make_field("zeno.clip_factor", PSTWIN_MEMBER(zeno.clip_factor), RealCodec{0},
                         "zeno++ with scaling = clip: g is shortened to at most clip_factor x ||v|| (1: to "
                         "||v||; larger leaves honest lengths alone and still bounds an accepted outlier)."));
  f.push_back(make_field("zeno.reverse_rejected", PSTWIN_MEMBER(zeno.reverse_rejected), BoolCodec{},
                         "zeno++: apply a rejected update reversed and scaled (ZenoPS's behaviour)."));
  f.push_back(make_field("zeno.refresh_every", PSTWIN_MEMBER(zeno.refresh_every), IntCodec{1},
                         "zeno++ (async): k, judged updates between two fresh references v."));
  f.push_back(make_field("zeno.validator_batch", PSTWIN_MEMBER(zeno.validator_batch), IntCodec{1},
                         "Validator minibatch size (its reference v and Zeno's f_r)."));
  f.push_back(make_field("zeno.validator_samples", PSTWIN_MEMBER(zeno.validator_samples), IntCodec{1},
                         "Held-out training images per validator, taken before the workers' shards."));
  f.push_back(make_field("zeno.duplicate_candidates", PSTWIN_MEMBER(zeno.duplicate_candidates), BoolCodec{},
                         "Fault hook: servers forward every push to its validator twice (the tags must "
                         "refuse the copy)."));
  f.push_back(
      make_field("attack.kind", PSTWIN_MEMBER(attack.kind), StringCodec{},
                 "none, sign-flip, gaussian, norm-matched, label-flip, bit-flip, alie, ipm, validator "
                 "(docs/ZENO.md)."));
  f.push_back(make_field("attack.byzantine", PSTWIN_MEMBER(attack.byzantine), CountListCodec{0, "[0, 3, 5]"},
                         "Ranks of the Byzantine workers, attacking every push."));
  f.push_back(make_field("attack.probability", PSTWIN_MEMBER(attack.probability), RealCodec{0},
                         "Instead of attack.byzantine: each worker's push of each iteration is attacked with "
                         "this probability (ZenoPS: 0.2), drawn from the seed's stream \"zeno.attack\"."));
  f.push_back(make_field("attack.scale", PSTWIN_MEMBER(attack.scale), RealCodec{0},
                         "sign-flip: -scale * u; norm-matched: the norm over the honest one."));
  f.push_back(make_field("attack.sigma", PSTWIN_MEMBER(attack.sigma), RealCodec{0}, "gaussian: sigma."));
  f.push_back(make_field("attack.epsilon", PSTWIN_MEMBER(attack.epsilon), RealCodec{0}, "ipm: epsilon."));
  f.push_back(make_field("attack.bit_rate", PSTWIN_MEMBER(attack.bit_rate), RealCodec{0},
                         "bit-flip: share of elements whose bit 30 is flipped."));
  f.push_back(make_field("attack.alie_z", PSTWIN_MEMBER(attack.alie_z), RealCodec{0},
                         "alie: z; 0 derives it from the workers and the Byzantine count."));
  // The attack aimed at the validator (docs/ZENO.md, "Modes").
  f.push_back(make_field("attack.margin", PSTWIN_MEMBER(attack.margin), RealCodec{0},
                         "validator: <u,v> aims at (zeno.zenops_rho + margin) ||v||^2, v estimated by the "
                         "attacker's own honest update; larger passes more often, harms less."));
  f.push_back(make_field("attack.norm_fraction", PSTWIN_MEMBER(attack.norm_fraction), RealCodec{0},
                         "validator: ||u||^2 = norm_fraction * zeno.norm_bound * ||v||^2, in (0, 1)."));
  // [staging]
  f.push_back(make_field(
      "staging.enabled", PSTWIN_MEMBER(staging.enabled), BoolCodec{},
      "Workers stage each partition in host shared memory (copy-in) before pushing it, as BytePS does."));
  f.push_back(make_field(
      "staging.naming", PSTWIN_MEMBER(staging.naming), EnumCodec<StagingNaming>{kNamingNames},
      "Names of staging buffers: `per-rank` (job, role, rank and key: co-located workers never share "
      "one) or `legacy-key-only` (BytePS's `BytePS_ShM_<key>`: co-located workers share it; the "
      "crossed-line race)"));
  f.push_back(make_field("staging.copy_bandwidth", PSTWIN_MEMBER(staging.copy_bandwidth_Bps), bandwidth,
                         "memcpy speed into the staging buffer (cost model)."));
  f.push_back(make_field("staging.job", PSTWIN_MEMBER(staging.job), StringCodec{},
                         "Job name, part of every staging buffer name."));
  // [perturbation]
  f.push_back(make_field("perturbation.delivery_jitter", PSTWIN_MEMBER(perturbation.delivery_jitter_s),
                         duration, "Extra delay per message, uniform in [0, x]."));
  f.push_back(make_field("perturbation.executor_jitter", PSTWIN_MEMBER(perturbation.executor_jitter_s),
                         duration, "Extra delay before each executor task, uniform in [0, x]."));
  f.push_back(make_field("perturbation.compute_jitter", PSTWIN_MEMBER(perturbation.compute_jitter_s),
                         duration, "Extra compute per iteration per worker, uniform in [0, x]."));
  f.push_back(make_field("perturbation.start_jitter", PSTWIN_MEMBER(perturbation.start_jitter_s), duration,
                         "Start offset of each node, uniform in [0, x]."));
  // [cpu]
  const auto rate = QuantityCodec{Quantity::kBandwidth, false};
  f.push_back(make_field("cpu.send_per_message", PSTWIN_MEMBER(cpu.send_per_message_s), duration,
                         "Simulator: CPU time the van spends sending each message, on the sending node's "
                         "`net` lane (one per node, serial, in order, shared with receiving); the message "
                         "leaves once it ran. `pstwin calibrate` measures it (docs/FIDELITY.md). 0: none."));
  f.push_back(make_field("cpu.send_bandwidth", PSTWIN_MEMBER(cpu.send_bandwidth_Bps), rate,
                         "Simulator: per-byte part of the send cost, a message's bytes (header included) "
                         "at this rate, e.g. \"3GBps\". 0: none."));
  f.push_back(make_field("cpu.receive_per_message", PSTWIN_MEMBER(cpu.receive_per_message_s), duration,
                         "Simulator: CPU time the van spends receiving each message, on the receiving "
                         "node's `net` lane; the node handles the message once it ran. 0: none."));
  f.push_back(make_field("cpu.receive_bandwidth", PSTWIN_MEMBER(cpu.receive_bandwidth_Bps), rate,
                         "Simulator: per-byte part of the receive cost, a message's bytes at this rate. 0: "
                         "none."));
  f.push_back(make_field(
      "cpu.cache_bytes", PSTWIN_MEMBER(cpu.cache_bytes), SizeCodec{},
      "Simulator: with cpu.send_bandwidth_beyond_cache and cpu.receive_bandwidth_beyond_cache, the bytes of "
      "a "
      "message charged at cpu.send_bandwidth / cpu.receive_bandwidth; the rest go at the beyond-cache rates "
      "(a message larger than a core's cache is copied and checksummed at memory speed). `pstwin calibrate` "
      "fits it. 0: every byte at cpu.send_bandwidth / cpu.receive_bandwidth."));
  f.push_back(
      make_field("cpu.send_bandwidth_beyond_cache", PSTWIN_MEMBER(cpu.send_bandwidth_beyond_cache_Bps), rate,
                 "Simulator: per-byte part of the send cost for a message's bytes past cpu.cache_bytes, "
                 "e.g. \"3GBps\". 0: cpu.send_bandwidth."));
  f.push_back(make_field("cpu.receive_bandwidth_beyond_cache",
                         PSTWIN_MEMBER(cpu.receive_bandwidth_beyond_cache_Bps), rate,
                         "Simulator: per-byte part of the receive cost for a message's bytes past "
                         "cpu.cache_bytes. 0: cpu.receive_bandwidth."));
  f.push_back(make_field(
      "cpu.wakeup", PSTWIN_MEMBER(cpu.wakeup_s), duration,
      "Simulator: the CPU time a node's van takes to wake for a message that finds it idle (its `net` lane "
      "free and nothing queued for its loop), charged on its lane (and, with cpu.shared_cores, a core) "
      "before the receive cost. A busy node reads the next message without it, so a stream that keeps the "
      "node busy pays it once and a blocking round trip at every hop. `pstwin calibrate` fits it "
      "(docs/FIDELITY.md). 0: none."));
  f.push_back(make_field(
      "cpu.shared_cores", PSTWIN_MEMBER(cpu.shared_cores), IntCodec{0},
      "Simulator: the cores that the `net` lanes of the nodes placed together share (see cpu.core_scope): "
      "each send or receive cost then also needs one of them, booked in the order charged, so nodes whose "
      "lanes would overlap wait for a free core, as node processes on too few cores do. `pstwin calibrate` "
      "writes this machine's CPU count. 0: every lane runs on a core of its own."));
  f.push_back(make_field(
      "cpu.core_scope", PSTWIN_MEMBER(cpu.core_scope), ChoiceCodec{kCoreScopes},
      "With cpu.shared_cores: `host`: each host has that many cores, shared by the nodes placed on it; "
      "`machine`: every host runs on one machine of that many cores (a loopback or namespace cluster)."));
  // [network]
  f.push_back(make_field("network.model", PSTWIN_MEMBER(network.model), ChoiceCodec{kNetworkModels},
                         "SimGrid network model."));
  f.push_back(make_field("network.bandwidth_factor", PSTWIN_MEMBER(network.bandwidth_factor), RealCodec{0},
                         "SimGrid bandwidth factor; 0: the model's own (LV08: 0.97)."));
  f.push_back(
      make_field("network.latency_factor", PSTWIN_MEMBER(network.latency_factor), RealCodec{0},
                 "SimGrid latency factor. Default 1: LV08's own 13.01 models a fresh connection and is 2-7x "
                 "too pessimistic for messages on an open one; 0: the model's own."));
  f.push_back(make_field("network.tcp_gamma", PSTWIN_MEMBER(network.tcp_gamma), RealCodec{0},
                         "SimGrid TCP window bound (bytes); 0: SimGrid's default (4194304)."));
  // [invariants]
  f.push_back(make_field("invariants.aggregates", PSTWIN_MEMBER(invariants.aggregates), BoolCodec{},
                         "Check that every aggregate equals the exact sum of its distinct contributions."));
  f.push_back(make_field("invariants.updates", PSTWIN_MEMBER(invariants.updates), BoolCodec{},
                         "Check that no update is applied twice or lost."));
  f.push_back(make_field("invariants.sync_identical", PSTWIN_MEMBER(invariants.sync_identical), BoolCodec{},
                         "`sync` mode: check that all workers hold identical parameters after each "
                         "iteration."));
  f.push_back(make_field("invariants.bound_tolerance", PSTWIN_MEMBER(invariants.bound_tolerance),
                         RealCodec{0},
                         "> 0: a violation if the mean iteration time exceeds the analytic bound * (1 + "
                         "tolerance); 0: not checked."));
  // [output]
  f.push_back(
      make_field("output.trace", PSTWIN_MEMBER(output.trace), BoolCodec{}, "Record a message trace."));
  f.push_back(make_field("output.trace_max_events", PSTWIN_MEMBER(output.trace_max_events), UInt64Codec{},
                         "Stop recording the trace after this many events."));
  f.push_back(make_field(
      "output.trace_iterations", PSTWIN_MEMBER(output.trace_iterations), CountListCodec{0, "[10, 12]"},
      "Trace only iterations [from, until), e.g. [10, 12] for iterations 10 and 11 (empty: "
      "all). Spans without an iteration (compute, heartbeats) are always kept."));
  f.push_back(make_field("output.trace_keys", PSTWIN_MEMBER(output.trace_keys), CountListCodec{0, "[0, 3]"},
                         "Trace only these keys' spans (empty: all)."));
  // [sim]
  f.push_back(make_field("sim.max_time", PSTWIN_MEMBER(sim.max_time_s), positive_duration,
                         "Simulated-time guard: a run still going at this time has stalled and fails."));
  f.push_back(make_field(
      "sim.stack_size_kb", PSTWIN_MEMBER(sim.stack_size_kb), IntCodec{16},
      "Stack size of each simulated actor, in KiB (workload.kind = \"mlp\": at least 1024, for the "
      "training step)."));
  f.push_back(make_field("sim.node_flow_limit", PSTWIN_MEMBER(sim.node_flow_limit), IntCodec{0},
                         "Bulk messages a node transmits at once (0: one per connection). Large runs use a "
                         "small limit: the solver's cost grows with flows in flight."));
  f.push_back(make_field(
      "sim.send_pool_slots", PSTWIN_MEMBER(sim.send_pool_slots), IntCodec{0},
      "> 0: every node sends through FPT's send pool, as the epoll van does: at most this "
      "many bulk messages in transmission, one per connection, connections taking turns "
      "by deficit round robin weighted by the load balancer's decisions (docs/FPT.md); "
      "with sim.network_model = \"flow\" or \"fifo\" the pool also paces each "
      "connection lighter than the heaviest at its share of the NIC. 0: no pool, every connection sends on "
      "its own."));
  f.push_back(make_field(
      "sim.pipeline_messages", PSTWIN_MEMBER(sim.pipeline_messages), BoolCodec{},
      "With sim.network_model = \"flow\": true, a connection's message that was ready while the previous "
      "one was on the wire follows its bytes, as on a TCP stream, and waits only what is left of its "
      "route's latency (paid once per burst); false, every message waits its route's latency in turn. "
      "ps.balancing = \"lb\" chooses true where the scenario leaves it out (docs/FPT.md)."));
  f.push_back(make_field(
      "sim.network_model", PSTWIN_MEMBER(sim.network_model), ChoiceCodec{kSimNetworkModels},
      "Who shares bandwidth among bulk messages: \"simgrid\" (SimGrid's solver), \"flow\" (pstwin's own "
      "max-min model of the same sharing rules, much faster with thousands of flows in flight; not with "
      "network.model = \"SMPI\"; docs/PERFORMANCE.md, \"Simulator scale\") or \"fifo\" (packets queued "
      "at every link and served in order, as tbf and a switch port do on a namespace cluster; a host's "
      "messages enter its NIC's queue as sim.fifo_host says; docs/FPT.md, \"The twin with queues\")."));
  f.push_back(make_field(
      "sim.fifo_host", PSTWIN_MEMBER(sim.fifo_host), ChoiceCodec{kFifoHosts},
      "With sim.network_model = \"fifo\": how a host's connections reach its NIC. \"epoll\": as the "
      "epoll van on Linux (a message enters the host's queue whole; a paced connection sends a message, "
      "then waits its size at its rate; receive shaping delays what the receiver reads, not the link). "
      "\"kernel-pacing\": the same with the van's PSTWIN_PACING=kernel (SO_MAX_PACING_RATE lets a "
      "message out at once after idling and repays in bursts: a 16 KB bucket). \"turns\": the NIC "
      "takes turns among messages a packet each, each packet of a paced or shaped connection held to "
      "its rate (docs/FPT.md, \"The twin with queues\")."));
  f.push_back(make_field(
      "sim.fifo_link_bucket", PSTWIN_MEMBER(sim.fifo_link_bucket), ChoiceCodec{kFifoLinkBuckets},
      "With sim.network_model = \"fifo\": \"tbf\": every link lets a burst through at once as tbf "
      "does on a namespace cluster (a bucket of max(16 KB, 1 ms at its rate), what `pstwin run --netns` "
      "sets); \"none\": a packet always takes its size at the link's rate, as a NIC."));
  f.push_back(make_field(
      "sim.simgrid_config", PSTWIN_MEMBER(sim.simgrid_config),
      StringListCodec{"SimGrid setting", "[\"network/crosstraffic:0\"]"},
      "Extra SimGrid settings, each \"name:value\" as for --cfg (e.g. \"network/crosstraffic:0\")."));
  // [run]
  f.push_back(make_field(
      "run.time_limit", PSTWIN_MEMBER(run.time_limit_s), positive_duration,
      "Wall-clock limit of a real run: `pstwin run` stops every node still running this long after it "
      "started them (they report what they completed; results.json says `completed: false` and why), and "
      "a `pstwin node` stops itself this long after it started. sim.max_time is the simulator's "
      "simulated-time guard and does not apply to real runs."));
  // [faults]
  f.push_back(make_field("faults.scheduler_start_delay", PSTWIN_MEMBER(faults.scheduler_start_delay_s),
                         duration, "Start the scheduler this late (exercises ps.connect_timeout)."));
  f.push_back(
      make_field("faults.loss", PSTWIN_MEMBER(faults.loss), ProbabilityCodec{},
                 "Probability that a message of faults.message_class is lost (never delivered). "
                 "Drawn per message from the sender's stream \"faults.loss\"; ps.resend recovers it."));
  f.push_back(make_field("faults.duplicate", PSTWIN_MEMBER(faults.duplicate), ProbabilityCodec{},
                         "Probability that a message of faults.message_class is delivered twice (stream "
                         "\"faults.duplicate\"); ps.resend drops the second copy."));
  f.push_back(
      make_field("faults.message_class", PSTWIN_MEMBER(faults.message_class), ChoiceCodec{kMessageClasses},
                 "Which messages faults.loss and faults.duplicate hit: \"data\" (push, pull, push-pull "
                 "and their responses), \"control\" (the rest: node table, barrier, heartbeats, acks, "
                 "shutdown, ...) or \"all\". Registration (a node without an id) is never hit."));
  f.push_back(make_field(
      "faults.partitions", PSTWIN_MEMBER(faults.partitions),
      fault_list<PartitionFault>("{ hosts | nodes, from, until }", kPartitionExample, read_partition,
                                 write_partition),
      "Network partitions: a message between the listed hosts (or nodes) and the rest that arrives in "
      "[from, until) is dropped. Hosts \"h1\", nodes as in results.json (\"worker 1\")."));
  f.push_back(make_field(
      "faults.clog", PSTWIN_MEMBER(faults.clogs),
      fault_list<ClogFault>("{ hosts | nodes, from, duration }", kClogExample, read_clog, write_clog),
      "Clogged connections: a message between the listed hosts (or nodes) and the rest "
      "that would start in [from, from + duration) waits until the end, then flows in "
      "order; nothing is lost."));
  f.push_back(
      make_field("faults.slow", PSTWIN_MEMBER(faults.slow),
                 fault_list<SlowFault>("{ node, factor, from, until }", kSlowExample, read_slow, write_slow),
                 "Slow nodes: the node's executor tasks (compute, engine, copy, push) that start in "
                 "[from, until) take factor x as long; until absent: to the end."));
  f.push_back(make_field(
      "faults.crashes", PSTWIN_MEMBER(faults.crashes),
      fault_list<CrashFault>("{ node, at | iteration }", kCrashExample, read_crash, write_crash),
      "Node crashes (the simulator): the node stops dead at simulated time `at`, or a worker as it would "
      "start iteration `iteration`; it handles and sends nothing more. The scheduler declares it dead after "
      "ps.heartbeat_timeout; ps.on_worker_loss says what a job does then."));
  return f;
}

#undef PSTWIN_MEMBER

// Indexes over the registry: field lookup, the table tree, and "did you mean" suggestions.
class Schema {
 public:
  enum class Kind { kField, kTable, kUnknown };

  static const Schema& get() {
    static const Schema schema;
    return schema;
  }

  std::span<const Field> fields() const { return fields_; }

  const Field* field(std::string_view path) const {
    const auto it = by_path_.find(path);
    return it == by_path_.end() ? nullptr : it->second;
  }

  Kind classify(std::string_view path) const {
    if (path == kLinksPath) return Kind::kTable;  // a field whose value is a table of hosts
    if (by_path_.contains(path)) return Kind::kField;
    if (children_.contains(path)) return Kind::kTable;
    if (path.starts_with(std::string(kLinksPath) + ".")) {
      const auto rest = split_path(path.substr(kLinksPath.size() + 1));
      if (rest.size() == 1 && !rest[0].empty()) return Kind::kTable;
      if (rest.size() == 2 && !rest[0].empty() && is_link_key(rest[1])) return Kind::kField;
    }
    return Kind::kUnknown;
  }

  // The keys a table may hold.
  std::vector<std::string> children(std::string_view table) const {
    if (table.starts_with(std::string(kLinksPath) + ".")) return {kLinkKeys.begin(), kLinkKeys.end()};
    const auto it = children_.find(table);
    return it == children_.end() ? std::vector<std::string>{} : it->second;
  }

  // `unknown field "x.y"; did you mean "x.z"?`, or the valid fields of the table it is in.
  std::string unknown_field(std::string_view path) const {
    std::string message = "unknown field " + quote_string(path);
    if (const auto fix = suggest(std::string(path), 0))
      return message + "; did you mean " + quote_string(*fix) + "?";
    // Name the deepest table that exists and list what it holds.
    const auto parts = split_path(path);
    std::string table;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string next = join_path(table, parts[i]);
      if (classify(next) != Kind::kTable) break;
      table = next;
    }
    if (table == kLinksPath)
      return message + "; write per-host links as [cluster.links.h3] with bandwidth and latency";
    const auto keys = children(table);
    return message +
           (table.empty() ? "; top-level fields and tables are: " : "; fields of [" + table + "] are: ") +
           join(keys, ", ");
  }

 private:
  Schema() : fields_(make_registry()) {
    children_[""];  // the root, even if empty
    std::set<std::string, std::less<>> closed_tables;
    std::string current_table;
    for (const Field& field : fields_) {
      if (!by_path_.emplace(field.path, &field).second) {
        throw std::logic_error("scenario registry: field " + std::string(field.path) + " is declared twice");
      }
      const auto parts = split_path(field.path);
      std::string prefix;
      for (const auto& part : parts) {
        auto& keys = children_[prefix];
        if (std::find(keys.begin(), keys.end(), part) == keys.end()) keys.push_back(part);
        prefix = join_path(prefix, part);
      }
      // resolved_toml() writes one [table] section per table: each table's fields must be contiguous.
      const std::string table(parent_of(field.path));
      if (table != current_table) {
        if (closed_tables.contains(table) || (table.empty() && !current_table.empty())) {
          throw std::logic_error("scenario registry: fields of [" + table + "] are not contiguous");
        }
        closed_tables.insert(current_table);
        current_table = table;
      }
    }
  }

  static bool is_link_key(std::string_view key) {
    return std::find(kLinkKeys.begin(), kLinkKeys.end(), key) != kLinkKeys.end();
  }

  // The closest key among `candidates`, if close enough to be a plausible typo.
  static std::optional<std::string> closest(std::string_view key, std::span<const std::string> candidates) {
    const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
    std::optional<std::string> best;
    std::size_t best_distance = limit + 1;
    for (const auto& candidate : candidates) {
      const std::size_t distance = edit_distance(key, candidate);
      if (distance < best_distance) {
        best_distance = distance;
        best = candidate;
      }
    }
    return best;
  }

  std::optional<std::string> suggest(const std::string& path, std::size_t depth) const {
    const auto parts = split_path(path);
    if (depth > parts.size()) return std::nullopt;
    std::string prefix;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::string next = join_path(prefix, parts[i]);
      const Kind kind = classify(next);
      const bool last = i + 1 == parts.size();
      if ((last && kind == Kind::kField) || (!last && kind == Kind::kTable)) {
        prefix = next;
        continue;
      }
      if (classify(prefix) == Kind::kTable && prefix != kLinksPath) {
        // Fix this component, keep the rest, and fix further components if needed.
        if (const auto fixed = closest(parts[i], children(prefix)); fixed && *fixed != parts[i]) {
          std::string candidate = join_path(prefix, *fixed);
          for (std::size_t j = i + 1; j < parts.size(); ++j) candidate = join_path(candidate, parts[j]);
          if (classify(candidate) != Kind::kUnknown) return candidate;
          if (auto deeper = suggest(candidate, depth + 1)) return deeper;
        }
      }
      break;
    }
    if (depth > 0) return std::nullopt;
    // The right name in the wrong table: "workload.partition_bytes" -> "ps.partition_bytes".
    const std::string_view leaf = leaf_of(path);
    for (const Field& field : fields_) {
      if (leaf_of(field.path) == leaf && field.path != path) return std::string(field.path);
    }
    return std::nullopt;
  }

  std::vector<Field> fields_;
  std::map<std::string_view, const Field*, std::less<>> by_path_;
  std::map<std::string, std::vector<std::string>, std::less<>> children_;
};

// ---------------------------------------------------------------------------------------------
// --set overrides

std::optional<toml::table> parse_toml_value(std::string_view text) {
  try {
    toml::table table = toml::parse("v = " + std::string(text), std::string_view("--set"));
    if (table.size() == 1 && table.contains("v")) return table;
  } catch (const toml::parse_error&) {
    // Not TOML: the caller takes the text as a plain string.
  }
  return std::nullopt;
}

// The value of `--set path=text` as a TOML node, held under the key "v".
toml::table override_value(std::string_view text, bool wants_string, bool is_list) {
  toml::table holder;
  if (auto parsed = parse_toml_value(text)) {
    const toml::node& value = *parsed->get("v");
    if (wants_string && !value.is_string()) {
      holder.insert("v", std::string(text));
      return holder;
    }
    if (!is_list || value.is_array()) return std::move(*parsed);
  }
  if (is_list) {
    // "h1,h2" or "4MB,1MB": comma-separated items, each a TOML value or else a string.
    toml::array items;
    std::string_view rest = text;
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (auto parsed_item = parse_toml_value(item);
          parsed_item && !parsed_item->get("v")->is_array() && !parsed_item->get("v")->is_table()) {
        items.push_back(std::move(*parsed_item->get("v")));
      } else {
        items.push_back(std::string(item));
      }
    }
    holder.insert("v", std::move(items));
    return holder;
  }
  holder.insert("v", std::string(text));
  return holder;
}

void apply_override(toml::table& root, const std::string& path, const std::string& text, Origins& origins,
                    const Schema& schema) {
  // Printed with every message about this value: a terminal escape in it stays text.
  const std::string origin = "--set " + without_controls(path + "=" + text);
  // TOML is UTF-8: a value that is not would be written to resolved.toml, which then cannot load.
  if (!is_utf8(path + text))
    throw ScenarioError(origin + ": not valid UTF-8; write the value in UTF-8 (or plain ASCII)");
  switch (schema.classify(path)) {
    case Schema::Kind::kUnknown:
      throw ScenarioError(origin + ": " + schema.unknown_field(path));
    case Schema::Kind::kTable:
      // Only a link host may be given whole ({ bandwidth = ..., latency = ... }); others field by field.
      if (!path.starts_with(std::string(kLinksPath) + ".")) {
        throw ScenarioError(origin + ": " + path + " is a table, not a field; set one of its fields: " +
                            join(schema.children(path), ", "));
      }
      break;
    case Schema::Kind::kField:
      break;
  }
  const Field* field = schema.field(path);
  toml::table holder =
      override_value(text, field != nullptr && field->wants_string, field != nullptr && field->is_list);

  const auto parts = split_path(path);
  toml::table* table = &root;
  std::string prefix;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix = join_path(prefix, parts[i]);
    toml::node* node = table->get(parts[i]);
    if (node == nullptr) node = &table->insert(parts[i], toml::table{}).first->second;
    table = node->as_table();
    if (table == nullptr) {
      throw ScenarioError(origin + ": " + prefix + " is not a table in " + origins.file() +
                          "; fix the file first");
    }
  }
  table->insert_or_assign(parts.back(), std::move(*holder.get("v")));
  origins.overridden(path, origin);
}

// ---------------------------------------------------------------------------------------------
// Reading

// Rejects unknown keys anywhere in the document, in file order.
void check_known(const toml::table& table, const std::string& prefix, const Schema& schema,
                 const Origins& origins) {
  std::vector<std::pair<std::string, const toml::node*>> entries;
  for (const auto& [key, node] : table) entries.emplace_back(std::string(key.str()), &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second->source().begin.line < b.second->source().begin.line;
  });
  for (const auto& [key, node] : entries) {
    const std::string path = join_path(prefix, key);
    switch (schema.classify(path)) {
      case Schema::Kind::kField:
        break;
      case Schema::Kind::kTable:
        if (!node->is_table()) {
          throw ScenarioError(origins.where(path, node) + ": " + path + " = " + describe(*node) +
                              ": expected a table; write [" + path + "] followed by its fields");
        }
        check_known(*node->as_table(), path, schema, origins);
        break;
      case Schema::Kind::kUnknown:
        throw ScenarioError(origins.where(path, node) + ": " + schema.unknown_field(path));
    }
  }
}

// Cross-field checks, and the default tensor list.
class Validator {
 public:
  Validator(Scenario& scenario, const toml::table& root, const Origins& origins, const Schema& schema)
      : s_(scenario), root_(root), origins_(origins), schema_(schema) {}

  void run() {
    if (s_.cluster.topology == Topology::kTwoTier && s_.cluster.switch_bandwidth_Bps > 0)
      fail("cluster.switch_bandwidth",
           "only applies to topology \"star\"; two-tier racks have cluster.rack_uplink_bandwidth");
    if (s_.cluster.topology == Topology::kTwoTier && s_.cluster.racks < 1) {
      fail("cluster.racks", "topology \"two-tier\" needs at least 1 rack; set cluster.racks = 1 or more");
    }
    if (s_.ps.heartbeat_timeout_s <= s_.ps.heartbeat_interval_s) {
      fail("ps.heartbeat_timeout", "must be greater than " + at("ps.heartbeat_interval", false) +
                                       "; raise ps.heartbeat_timeout or lower ps.heartbeat_interval");
    }
    check_name();
    check_tensors();
    choose_lb_tuning();
    choose_push_pull();
    // Before anything sized by the scenario is built (hosts, tensors, nodes).
    if (const auto problem = check_resources(s_)) fail(problem->field, problem->problem);
    check_hosts();
    if (s_.lb.balancing == Balancing::kLb && s_.workload.layerwise)
      fail("ps.balancing",
           "\"lb\" is not supported with workload.layerwise yet; set one of them to its "
           "default (ps.balancing = \"hash\" or workload.layerwise = false)");
    if (s_.lb.balancing == Balancing::kLb && s_.ps.mode != TrainingMode::kSync)
      fail("ps.balancing",
           "\"lb\" decides per iteration, which only sync mode has; set ps.mode = \"sync\" "
           "or ps.balancing = \"hash\"");
    check_worker_aggregators();
    if (s_.workload.kind == WorkloadKind::kMlp) check_train();
    check_device();
    check_local_reduce();
    check_zeno();
    check_cpu();
    check_faults();
    const auto& window = s_.output.trace_iterations;
    if (!window.empty() && (window.size() != 2 || window[0] >= window[1]))
      fail("output.trace_iterations",
           "expected [from, until] with from < until (iterations from .. until - 1), e.g. [10, 12], or [] "
           "for all");
  }

 private:
  // ps.balancing = "lb": the fields the scenario (file or --set) left out take the tuned values, so
  // every node that loads the same scenario runs the same partitions (job_fields has them).
  void choose_lb_tuning() const {
    if (s_.lb.balancing != Balancing::kLb) return;
    LbChoice choice;
    choice.chose_partition_bytes = find_node(root_, "ps.partition_bytes") == nullptr;
    const LbTuning tuning =
        lb_tuning(s_, choice.chose_partition_bytes ? std::nullopt : std::optional(s_.ps.partition_bytes));
    choice.chose_scheduling_credit = find_node(root_, "ps.scheduling_credit") == nullptr;
    choice.chose_push_pull = find_node(root_, "ps.push_pull") == nullptr;
    if (choice.chose_partition_bytes) s_.ps.partition_bytes = tuning.partition_bytes;
    if (choice.chose_scheduling_credit) s_.ps.scheduling_credit = tuning.scheduling_credit;
    if (choice.chose_push_pull)
      s_.ps.push_pull = tuning.fused ? PushPullMode::kFused : PushPullMode::kSeparate;
    choice.chose_send_pool_slots = find_node(root_, "sim.send_pool_slots") == nullptr;
    choice.chose_network_model = find_node(root_, "sim.network_model") == nullptr;
    choice.chose_pipeline_messages = find_node(root_, "sim.pipeline_messages") == nullptr;
    if (choice.chose_send_pool_slots) s_.sim.send_pool_slots = tuning.send_pool_slots;
    if (choice.chose_network_model) s_.sim.network_model = tuning.network_model;
    if (choice.chose_pipeline_messages) s_.sim.pipeline_messages = tuning.pipeline_messages;
    choice.partition_bytes = s_.ps.partition_bytes;
    choice.scheduling_credit = s_.ps.scheduling_credit;
    choice.fused = s_.ps.push_pull == PushPullMode::kFused;
    choice.send_pool_slots = s_.sim.send_pool_slots;
    choice.network_model = s_.sim.network_model;
    choice.pipeline_messages = s_.sim.pipeline_messages;
    s_.lb_chosen = choice;
  }

  // ps.push_pull left out (and not chosen by "lb" above): fused where the protocol allows, since it
  // costs one round trip per partition instead of two; separate with validators, whose verdicts a
  // fused reply cannot wait for.
  void choose_push_pull() const {
    if (s_.lb_chosen || find_node(root_, "ps.push_pull") != nullptr) return;
    s_.ps.push_pull = s_.roles.validators > 0 ? PushPullMode::kSeparate : PushPullMode::kFused;
  }

  // "where: path = value", the value as the file wrote it or else as resolved.
  std::string at(std::string_view path, bool with_where = true) const {
    const toml::node* node = find_node(root_, path);
    std::string value;
    if (node != nullptr) {
      value = describe(*node);
    } else if (const Field* field = schema_.field(path)) {
      value = field->write(s_);
    }
    std::string text = std::string(path) + (value.empty() ? "" : " = " + value);
    return with_where ? origins_.where(path, node) + ": " + text : text;
  }

  [[noreturn]] void fail(std::string_view path, std::string_view problem) const {
    throw ScenarioError(at(path) + ": " + std::string(problem));
  }

  // The name becomes a directory (pstwin-out/<name>) and is printed: one safe path component.
  void check_name() const {
    const std::string& name = s_.name;
    constexpr std::size_t kMaxName = 128;
    if (name.empty() || name == "." || name == "..")
      fail("name", "must be a name, usable as a directory name, e.g. \"quickstart\"");
    if (name.size() > kMaxName) fail("name", "is longer than " + std::to_string(kMaxName) + " bytes");
    for (const char c : name) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f)
        fail("name",
             "may not contain '/', '\\' or control characters: it names the output directory "
             "pstwin-out/<name>; use letters, digits, '-', '_' or '.'");
    }
  }

  void check_tensors() {
    auto& w = s_.workload;
    const bool has_list = !w.tensor_bytes.empty();
    const bool has_model = w.model_bytes > 0;
    if (has_list && has_model) {
      fail("workload.model_bytes",
           "workload.tensor_bytes is set too; keep one of them (workload.tensor_bytes = [] to split "
           "model_bytes)");
    }
    if (has_list && w.tensors != 0) {
      fail("workload.tensors",
           "only applies with workload.model_bytes, not with workload.tensor_bytes; remove workload.tensors");
    }
    if (has_model && w.tensors < 1) {
      fail("workload.model_bytes", "needs workload.tensors >= 1, the number of tensors to split it into");
    }
    if (has_model && w.model_bytes / 4 < static_cast<std::uint64_t>(w.tensors)) {
      fail("workload.model_bytes", "too small for workload.tensors = " + std::to_string(w.tensors) +
                                       " tensors of at least 4 bytes; raise it to at least " +
                                       std::to_string(4 * static_cast<std::uint64_t>(w.tensors)) +
                                       " or lower workload.tensors");
    }
    if (w.layerwise && !(w.forward_share > 0 && w.forward_share < 1))
      fail("workload.forward_share", "must be between 0 and 1 (exclusive), e.g. 0.33");
    if (!has_list && !has_model) {
      if (w.tensors != 0) {
        fail("workload.tensors",
             "needs workload.model_bytes, the total size to split; set it, e.g. \"100MB\"");
      }
      w.tensor_bytes = default_tensor_bytes();
    }
  }

  void check_train() const {
    const auto& t = s_.train;
    constexpr std::uint64_t kFeatures = 784, kClasses = 10, kTrainImages = 60000;
    if (t.layers.size() < 2)
      fail("train.layers", "needs at least an input and an output width, e.g. [784, 256, 128, 10]");
    if (t.layers.front() != kFeatures)
      fail("train.layers", "must start with 784, the pixels of a 28x28 Fashion-MNIST image");
    if (t.layers.back() != kClasses) fail("train.layers", "must end with 10, the Fashion-MNIST classes");
    if (!(t.learning_rate > 0)) fail("train.learning_rate", "must be greater than 0, e.g. 0.05");
    if (t.momentum >= 1) fail("train.momentum", "must be below 1 (0 turns momentum off)");
    if (t.sharding == ShardingKind::kDirichlet && !(t.dirichlet_alpha > 0))
      fail("train.dirichlet_alpha", "must be greater than 0, e.g. 0.5");
    if (s_.workload.payload != PayloadMode::kReal)
      fail("workload.payload",
           "workload.kind = \"mlp\" sends real gradients; set workload.payload = \"real\"");
    const std::uint64_t shard = kTrainImages / static_cast<std::uint64_t>(std::max(s_.roles.workers, 1));
    if (t.sharding == ShardingKind::kIid && static_cast<std::uint64_t>(t.batch) > shard)
      fail("train.batch", "is larger than a worker's shard (" + std::to_string(kTrainImages) + " images / " +
                              std::to_string(s_.roles.workers) + " workers = " + std::to_string(shard) +
                              "); lower train.batch or roles.workers");
  }

  void check_device() const {
    if (s_.workload.device != DeviceKind::kCuda) return;
    if (!built_with_cuda())
      fail("workload.device",
           "this pstwin was built without CUDA; install the CUDA toolkit (nvcc) and rebuild with "
           "`cmake --preset default -DPSTWIN_CUDA=ON && cmake --build build` (docs/HARDWARE.md), or use "
           "workload.device = \"cpu\"");
    // workload.kind = "mlp" runs each worker's MLP step on its GPU and pushes the gradient from host
    // memory, so only the synthetic tensors need the staging copy from the device.
    if (s_.workload.kind == WorkloadKind::kSynthetic && !s_.staging.enabled)
      fail("workload.device",
           "\"cuda\" copies each partition from the GPU into its host staging buffer; "
           "set staging.enabled = true or workload.device = \"cpu\"");
  }

  // What the root's one push per host cannot stand for: per-worker inputs (robust rules, validators,
  // staleness, late or lost workers), per-worker routing (lb). And where the values are: "shm" sums host
  // memory, "nccl" the GPUs' (device copies are its part).
  void check_local_reduce() const {
    if (s_.ps.local_reduce == LocalReduce::kNone) return;
    const bool nccl = s_.ps.local_reduce == LocalReduce::kNccl;
    if (nccl && !built_with_nccl())
      fail("ps.local_reduce",
           "\"nccl\" reduces between the host's GPUs with NCCL, and this pstwin was built without NCCL; "
           "install NCCL (nccl.h, libnccl) with the CUDA toolkit and rebuild with `cmake --preset default "
           "-DPSTWIN_CUDA=ON -DPSTWIN_NCCL=ON && cmake --build build` (docs/HARDWARE.md), or use \"shm\" "
           "(host shared memory) or \"none\"");
    if (nccl && s_.workload.device != DeviceKind::kCuda)
      fail("ps.local_reduce",
           "\"nccl\" reduces the tensors on the host's GPUs, and workload.device = \"" +
               std::string(to_string(s_.workload.device)) +
               "\" keeps them in host memory; set workload.device = \"cuda\", or use ps.local_reduce = "
               "\"shm\" (host shared memory) for host tensors");
    const auto refuse = [&](std::string_view why) {
      fail("ps.local_reduce", std::string(why) + "; set ps.local_reduce = \"none\" or change that field");
    };
    if (s_.ps.mode != TrainingMode::kSync)
      refuse(
          "sums each round of the host's workers before one push, which async mode has no rounds for "
          "(ps.mode = \"async\")");
    if (s_.workload.kind != WorkloadKind::kSynthetic)
      refuse(
          "needs workload.kind = \"synthetic\": servers would see one summed gradient per host, so "
          "zeno rules, validators and the SGD mean over workers could not judge or weigh each worker");
    if (s_.lb.balancing != Balancing::kHash)
      refuse("routes each host's pushes through one worker, which ps.balancing = \"lb\" does not model");
    if (s_.workload.layerwise) refuse("is not supported with workload.layerwise = true yet");
    if (!nccl && s_.workload.device != DeviceKind::kCpu)
      refuse("\"shm\" reduces host memory; workload.device = \"cuda\" would need \"nccl\"");
    if (s_.ps.backup_workers > 0)
      refuse("makes a host's workers one push, which ps.backup_workers > 0 cannot drop separately");
    if (s_.ps.continues_on_worker_loss())
      refuse("cannot go on without a host's root worker (ps.on_worker_loss = \"continue\")");
  }

  void check_cpu() const {
    const auto& cpu = s_.cpu;
    constexpr int kMaxCores = 4096;  // each core is a list of bookings, searched per charge
    if (cpu.shared_cores > kMaxCores)
      fail("cpu.shared_cores", "must be at most " + std::to_string(kMaxCores) +
                                   " (cores per host or machine); 0 gives every lane a core of its own");
    if (cpu.shared_cores > 0 && !cpu.charged())
      fail("cpu.shared_cores",
           "shares the cores on which the van's costs run, and no cost is set; set cpu.send_per_message, "
           "cpu.send_bandwidth, cpu.receive_per_message or cpu.receive_bandwidth (`pstwin calibrate` "
           "writes them), or remove cpu.shared_cores");
    const bool beyond = cpu.send_bandwidth_beyond_cache_Bps > 0 || cpu.receive_bandwidth_beyond_cache_Bps > 0;
    if (beyond && cpu.cache_bytes == 0)
      fail(cpu.send_bandwidth_beyond_cache_Bps > 0 ? "cpu.send_bandwidth_beyond_cache"
                                                   : "cpu.receive_bandwidth_beyond_cache",
           "applies to a message's bytes past cpu.cache_bytes, which is 0; set cpu.cache_bytes (e.g. "
           "\"512KB\", "
           "as `pstwin calibrate` fits it) or remove the beyond-cache rates");
    if (cpu.cache_bytes > 0 && !beyond)
      fail("cpu.cache_bytes",
           "says where the beyond-cache rates begin, and neither cpu.send_bandwidth_beyond_cache nor "
           "cpu.receive_bandwidth_beyond_cache is set; set them (`pstwin calibrate` writes them) or remove "
           "cpu.cache_bytes");
    // "host", the default, is accepted alone: a resolved scenario (`pstwin check`) writes every field.
    if (cpu.shared_cores == 0 && cpu.core_scope != "host")
      fail("cpu.core_scope",
           "says what shares cpu.shared_cores, which is 0 (a core per lane); set cpu.shared_cores to the "
           "cores of a host or machine, e.g. 2, or remove cpu.core_scope");
  }

  // Rule and attack names and their own parameters are checked by src/zeno when the run is built.
  void check_worker_aggregators() const {
    if (!s_.lb.worker_aggregators) return;
    if (s_.lb.balancing != Balancing::kLb)
      fail("lb.worker_aggregators",
           "the scheduler's load balancer assigns the ranges; set ps.balancing = \"lb\"");
    if (s_.roles.workers < 3)
      fail("lb.worker_aggregators",
           "needs at least 3 workers (roles.workers = " + std::to_string(s_.roles.workers) +
               "): with 2 a worker's link carries the whole model whatever its share");
    // A trained key's parameters and momentum live where it is aggregated and do not move with a range.
    if (s_.workload.kind != WorkloadKind::kSynthetic)
      fail("lb.worker_aggregators", "needs workload.kind = \"synthetic\" (trained parameters do not move)");
  }

  void check_zeno() const {
    const bool mlp = s_.workload.kind == WorkloadKind::kMlp;
    if (s_.roles.validators > 0 && !mlp)
      fail("roles.validators",
           "validators score real gradients; set workload.kind = \"mlp\" or 0 validators");
    if (s_.roles.validators > s_.roles.workers)
      fail("roles.validators", "more validators than workers (roles.workers = " +
                                   std::to_string(s_.roles.workers) + "); each needs at least one worker");
    if (s_.roles.validators > 0 && s_.ps.push_pull == PushPullMode::kFused)
      fail("roles.validators",
           "validators need ps.push_pull = \"separate\" (a fused reply cannot wait for them)");
    if (s_.zeno.rule != "mean" && !mlp) fail("zeno.rule", "needs workload.kind = \"mlp\"");
    if (s_.attack.kind != "none" && !mlp) fail("attack.kind", "needs workload.kind = \"mlp\"");
    if (s_.attack.probability > 1) fail("attack.probability", "must be in [0, 1], e.g. 0.2");
    if (s_.attack.probability > 0 && !s_.attack.byzantine.empty())
      fail("attack.probability", "attack.byzantine is set too; keep one (fixed attackers or a probability)");
    for (std::size_t i = 0; i < s_.attack.byzantine.size(); ++i) {
      const auto rank = s_.attack.byzantine[i];
      if (rank >= static_cast<std::uint64_t>(s_.roles.workers))
        fail("attack.byzantine", "rank " + std::to_string(rank) + " is not a worker (ranks 0.." +
                                     std::to_string(s_.roles.workers - 1) + ")");
      for (std::size_t j = 0; j < i; ++j)
        if (s_.attack.byzantine[j] == rank)
          fail("attack.byzantine", "rank " + std::to_string(rank) + " twice");
    }
    if (s_.attack.kind != "none" && s_.attack.byzantine.empty() && s_.attack.probability == 0)
      fail("attack.kind", "no worker attacks: set attack.byzantine = [ranks] or attack.probability");
    if (s_.train.lr_final > 1) fail("train.lr_final", "must be in [0, 1], a fraction of train.learning_rate");
    const bool planned = s_.train.participation < 1 || s_.train.drop_rate > 0;
    const char* planned_field = s_.train.drop_rate > 0 ? "train.drop_rate" : "train.participation";
    if (s_.train.participation > 1 || !(s_.train.participation > 0))
      fail("train.participation", "must be in (0, 1], the share of workers per round, e.g. 0.5");
    if (s_.train.drop_rate >= 1) fail("train.drop_rate", "must be in [0, 1), e.g. 0.1");
    if (planned && !mlp) fail(planned_field, "needs workload.kind = \"mlp\"");
    if (s_.train.worker_momentum && !mlp)
      fail("train.worker_momentum",
           "trains the MLP's momentum on the workers: needs workload.kind = \"mlp\"");
    if (planned && s_.ps.mode != TrainingMode::kSync)
      fail(planned_field,
           "is a sync-round mode (async pushes are not grouped into rounds): set ps.mode = \"sync\"");
    if (planned && (s_.workload.layerwise || s_.lb.balancing == Balancing::kLb))
      fail(planned_field, "is not supported with workload.layerwise or ps.balancing = \"lb\" yet");
    if (s_.ps.backup_workers > 0) {
      if (s_.ps.mode != TrainingMode::kSync)
        fail("ps.backup_workers", "applies to sync rounds; async applies every push as it comes: set 0");
      if (s_.ps.backup_workers >= s_.roles.workers)
        fail("ps.backup_workers", "must be below roles.workers = " + std::to_string(s_.roles.workers) +
                                      " (a round needs at least one push); lower it");
      if (s_.roles.validators > 0 || s_.lb.worker_aggregators || s_.train.participation < 1 ||
          s_.train.drop_rate > 0)
        fail("ps.backup_workers",
             "is not supported with validators, lb.worker_aggregators, train.participation "
             "or train.drop_rate (their rounds already decide who pushes); set 0");
    }
    if (s_.ps.max_staleness > 0 && s_.ps.mode != TrainingMode::kAsync)
      fail("ps.max_staleness", "bounds async staleness; sync rounds have none: set ps.mode = \"async\" or 0");
    if (s_.ps.max_staleness > 0 && !mlp)
      fail("ps.max_staleness",
           "refused pushes change the synthetic workload's checked sums: use workload.kind = \"mlp\" or 0");
    if (s_.ps.max_staleness > 0 && s_.roles.validators > 0)
      fail("ps.max_staleness",
           "is not supported with validators yet (they judge whole updates, servers "
           "refuse per key): set roles.validators = 0 or ps.max_staleness = 0");
  }

  bool host_exists(std::string_view name) const {
    if (!name.starts_with('h')) return false;
    int index = -1;
    const auto digits = name.substr(1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    return ec == std::errc{} && end == digits.data() + digits.size() && index >= 0 &&
           index < s_.host_count() && s_.host_name(index) == name;
  }

  void check_host(std::string_view path, std::string_view name) const {
    if (host_exists(name)) return;
    const int n = s_.host_count();
    std::string hosts = n == 1 ? "the only host is h0" : "hosts are h0..h" + std::to_string(n - 1);
    hosts += s_.cluster.hosts > 0 ? " (cluster.hosts = " + std::to_string(n) + ")"
                                  : " (cluster.hosts = 0: one per node, 1 + roles.servers + roles.workers)";
    fail(path, "host " + quote_string(name) + " does not exist; " + hosts +
                   "; use one of them or set cluster.hosts");
  }

  bool node_exists(std::string_view name) const {
    if (name == "scheduler") return true;
    for (const auto& [role, count] : {std::pair<std::string_view, int>{"server", s_.roles.servers},
                                      {"worker", s_.roles.workers},
                                      {"validator", s_.roles.validators}}) {
      if (!name.starts_with(role) || name.size() < role.size() + 2 || name[role.size()] != ' ') continue;
      const auto digits = name.substr(role.size() + 1);
      int rank = -1;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
      if (ec == std::errc{} && end == digits.data() + digits.size() && rank >= 0 && rank < count &&
          std::to_string(rank) == digits)
        return true;
    }
    return false;
  }

  void check_node(std::string_view path, std::string_view where, std::string_view name) const {
    if (node_exists(name)) return;
    fail(path, std::string(where) + "node " + quote_string(name) +
                   " does not exist; nodes are \"scheduler\", " + "\"server 0\"..\"server " +
                   std::to_string(s_.roles.servers - 1) + "\", \"worker 0\"..\"worker " +
                   std::to_string(s_.roles.workers - 1) + "\"" +
                   (s_.roles.validators > 0
                        ? ", \"validator 0\"..\"validator " + std::to_string(s_.roles.validators - 1) + "\""
                        : std::string()) +
                   " (as in results.json); use one of them");
  }

  void check_side(std::string_view path, const std::string& where, const FaultSide& side) const {
    for (const auto& host : side.hosts)
      if (!host_exists(host)) check_host(path, host);  // fails naming the hosts that exist
    for (const auto& node : side.nodes) check_node(path, where, node);
  }

  void check_window(std::string_view path, const std::string& where, double from, double until,
                    std::string_view fix) const {
    if (until > from) return;
    fail(path, where + "until (" + units::format_real(Quantity::kDuration, until) +
                   ") must come after from (" + units::format_real(Quantity::kDuration, from) + "); " +
                   std::string(fix));
  }

  void check_faults() const {
    const auto& f = s_.faults;
    if (s_.ps.continues_on_worker_loss() && s_.roles.validators > 0)
      fail("ps.on_worker_loss", "\"continue\" is not supported with validators (roles.validators = " +
                                    std::to_string(s_.roles.validators) +
                                    "): a lost worker's validator would wait for it; use \"fail\"");
    if (s_.ps.continues_on_worker_loss() && s_.lb.worker_aggregators)
      fail("ps.on_worker_loss",
           "\"continue\" is not supported with lb.worker_aggregators = true (a lost "
           "worker takes its keys with it); use \"fail\"");
    if (s_.ps.continues_on_worker_loss() && s_.roles.workers < 2)
      fail("ps.on_worker_loss", "\"continue\" needs at least 2 workers (roles.workers = " +
                                    std::to_string(s_.roles.workers) + "); use \"fail\"");
    auto entry = [](std::size_t i) { return "entry " + std::to_string(i) + ": "; };
    for (std::size_t i = 0; i < f.partitions.size(); ++i) {
      check_side("faults.partitions", entry(i), f.partitions[i].side);
      check_window("faults.partitions", entry(i), f.partitions[i].from_s, f.partitions[i].until_s,
                   "swap or widen them");
    }
    for (std::size_t i = 0; i < f.clogs.size(); ++i) check_side("faults.clog", entry(i), f.clogs[i].side);
    for (std::size_t i = 0; i < f.slow.size(); ++i) {
      check_node("faults.slow", entry(i), f.slow[i].node);
      check_window("faults.slow", entry(i), f.slow[i].from_s, f.slow[i].until_s,
                   "swap them, or leave until out to slow it to the end");
    }
    for (std::size_t i = 0; i < f.crashes.size(); ++i) {
      check_node("faults.crashes", entry(i), f.crashes[i].node);
      if (f.crashes[i].iteration && f.crashes[i].node.rfind("worker ", 0) != 0)
        fail("faults.crashes", entry(i) + "iteration applies to workers only (\"" + f.crashes[i].node +
                                   "\" has none); give at = \"2s\" instead");
    }
    if (s_.resend_enabled() && s_.ps.resend_timeout_s >= s_.ps.heartbeat_timeout_s)
      fail("ps.resend_timeout", "must be below " + at("ps.heartbeat_timeout", false) +
                                    " (a message unacknowledged that long fails the run); lower it");
  }

  void check_hosts() const {
    if (!s_.roles.scheduler_host.empty()) check_host("roles.scheduler_host", s_.roles.scheduler_host);
    for (const auto& host : s_.roles.server_hosts) check_host("roles.server_hosts", host);
    for (const auto& host : s_.roles.worker_hosts) check_host("roles.worker_hosts", host);
    for (const auto& host : s_.roles.validator_hosts) check_host("roles.validator_hosts", host);
    for (const auto& [host, spec] : s_.cluster.host_links) {
      check_host(std::string(kLinksPath) + "." + host, host);
    }
  }

  Scenario& s_;
  const toml::table& root_;
  const Origins& origins_;
  const Schema& schema_;
};

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

std::string_view to_string(Topology value) {
  return enum_text<Topology>(kTopologyNames, value);
}
std::string_view to_string(TrainingMode value) {
  return enum_text<TrainingMode>(kModeNames, value);
}
std::string_view to_string(KeyHash value) {
  return enum_text<KeyHash>(kKeyHashNames, value);
}
std::string_view to_string(PayloadMode value) {
  return enum_text<PayloadMode>(kPayloadNames, value);
}
std::string_view to_string(StagingNaming value) {
  return enum_text<StagingNaming>(kNamingNames, value);
}
std::string_view to_string(WorkloadKind value) {
  return enum_text<WorkloadKind>(kWorkloadKindNames, value);
}
std::string_view to_string(PushPullMode value) {
  return enum_text<PushPullMode>(kPushPullNames, value);
}
std::string_view to_string(Balancing value) {
  return enum_text<Balancing>(kBalancingNames, value);
}
std::string_view to_string(DeviceKind value) {
  return enum_text<DeviceKind>(kDeviceNames, value);
}
std::string_view to_string(LocalReduce value) {
  return enum_text<LocalReduce>(kLocalReduceNames, value);
}

bool built_with_cuda() {
#ifdef PSTWIN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#ifdef PSTWIN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string_view to_string(ShardingKind value) {
  return enum_text<ShardingKind>(kShardingNames, value);
}

std::vector<std::uint64_t> Scenario::declared_tensor_bytes() const {
  if (workload.kind == WorkloadKind::kMlp) {
    std::vector<std::uint64_t> sizes;  // W_l [out][in], then b_l [out], as train::Mlp lays them out
    for (std::size_t l = 1; l < train.layers.size(); ++l) {
      sizes.push_back(4 * train.layers[l] * train.layers[l - 1]);
      sizes.push_back(4 * train.layers[l]);
    }
    return sizes;
  }
  if (!workload.tensor_bytes.empty()) return workload.tensor_bytes;
  if (workload.model_bytes == 0 || workload.tensors < 1) return default_tensor_bytes();
  // Split model_bytes (rounded down to whole float32s) into `tensors` parts that differ by at most 4B.
  const auto count = static_cast<std::uint64_t>(workload.tensors);
  const std::uint64_t words = workload.model_bytes / 4;
  std::vector<std::uint64_t> sizes;
  sizes.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i)
    sizes.push_back(4 * (words / count + (i < words % count ? 1 : 0)));
  return sizes;
}

int Scenario::host_count() const {
  return cluster.hosts > 0 ? cluster.hosts : 1 + roles.servers + roles.workers + roles.validators;
}

std::string Scenario::host_name(int index) const {
  return "h" + std::to_string(index);
}

std::string Scenario::scheduler_host_name() const {
  return roles.scheduler_host.empty() ? host_name(0) : roles.scheduler_host;
}

std::string Scenario::server_host_name(int rank) const {
  const auto& hosts = roles.server_hosts;
  if (!hosts.empty()) return hosts[static_cast<std::size_t>(rank) % hosts.size()];
  return host_name((1 + rank) % host_count());
}

std::string Scenario::worker_host_name(int rank) const {
  const auto& hosts = roles.worker_hosts;
  if (!hosts.empty()) return hosts[static_cast<std::size_t>(rank) % hosts.size()];
  return host_name((1 + roles.servers + rank) % host_count());
}

std::string Scenario::validator_host_name(int rank) const {
  const auto& hosts = roles.validator_hosts;
  if (!hosts.empty()) return hosts[static_cast<std::size_t>(rank) % hosts.size()];
  return host_name((1 + roles.servers + roles.workers + rank) % host_count());
}

LinkSpec Scenario::host_link(const std::string& host) const {
  if (auto it = cluster.host_links.find(host); it != cluster.host_links.end()) return it->second;
  return {cluster.host_bandwidth_Bps, cluster.host_latency_s};
}

Scenario parse_scenario(std::string_view toml_text, const std::string& source_name,
                        const std::vector<std::pair<std::string, std::string>>& overrides) {
  const Schema& schema = Schema::get();
  const std::string file = source_name.empty() ? "<scenario>" : source_name;
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(file));
  } catch (const toml::parse_error& error) {
    throw ScenarioError(file + ":" + std::to_string(error.source().begin.line) + ":" +
                        std::to_string(error.source().begin.column) + ": " +
                        std::string(error.description()));
  }

  Origins origins(file);
  for (const auto& [path, text] : overrides) apply_override(root, path, text, origins, schema);
  check_known(root, "", schema, origins);

  Scenario scenario;
  for (const Field& field : schema.fields()) {
    if (const toml::node* node = find_node(root, field.path)) {
      field.read(Value{*node, std::string(field.path), origins, scenario}, scenario);
    }
  }
  Validator(scenario, root, origins, schema).run();
  scenario.source_path = source_name;
  scenario.overrides = overrides;
  return scenario;
}

Scenario load_scenario(const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& overrides) {
  // A device (/dev/zero), a pipe or a huge file would be read forever or into all memory.
  constexpr std::uintmax_t kMaxScenarioBytes = 16 << 20;
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status))
    throw ScenarioError(path + ": cannot open the scenario file; check the path");
  if (!std::filesystem::is_regular_file(status))
    throw ScenarioError(path +
                        ": not a regular file; a scenario is a TOML file, e.g. scenarios/quickstart.toml");
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > kMaxScenarioBytes)
    throw ScenarioError(path + ": " + std::to_string(size) + " bytes, larger than " +
                        std::to_string(kMaxScenarioBytes >> 20) +
                        " MiB; a scenario file is a few KB of TOML");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScenarioError(path + ": cannot open the scenario file; check the path");
  // One byte more than it said, to notice a file that grew since.
  std::string text(static_cast<std::size_t>(std::min<std::uintmax_t>(size, kMaxScenarioBytes)) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw ScenarioError(path + ": cannot read the scenario file");
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > size) throw ScenarioError(path + ": changed while it was read; try again");
  return parse_scenario(text, path, overrides);
}

std::string resolved_toml(const Scenario& scenario) {
  std::string out;
  std::string_view table;
  for (const Field& field : Schema::get().fields()) {
    const std::string_view field_table = parent_of(field.path);
    if (field_table != table) {
      table = field_table;
      out += "\n[" + std::string(table) + "]\n";
    }
    out += toml_key(leaf_of(field.path)) + " = " + field.write(scenario) + "\n";
  }
  return out;
}

namespace {

// Whole tables and single fields that do not define the job (see job_fields in scenario.hpp).
constexpr std::array<std::string_view, 9> kNodeLocalTables{
    "output", "invariants", "run", "cluster", "network", "perturbation", "cpu", "sim", "faults"};
constexpr std::array<std::string_view, 8> kNodeLocalFields{"name",
                                                           "description",
                                                           "ps.connect_timeout",
                                                           "train.dataset",
                                                           "roles.scheduler_host",
                                                           "roles.server_hosts",
                                                           "roles.worker_hosts",
                                                           "roles.validator_hosts"};

bool defines_job(const Scenario& scenario, std::string_view path) {
  // ps.local_reduce: the workers' placement decides who pushes for whom and how many pushes a round
  // gets, so nodes that placed them differently would wait for each other forever.
  if (scenario.ps.local_reduce != LocalReduce::kNone &&
      (path == "roles.worker_hosts" || path == "cluster.hosts"))
    return true;
  if (std::ranges::find(kNodeLocalTables, parent_of(path)) != kNodeLocalTables.end()) return false;
  if (std::ranges::find(kNodeLocalFields, path) != kNodeLocalFields.end()) return false;
  if (path == "seed")
    return scenario.workload.kind == WorkloadKind::kMlp || scenario.train.participation < 1 ||
           scenario.train.drop_rate > 0;
  return true;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> job_fields(const Scenario& scenario) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (const Field& field : Schema::get().fields())
    if (defines_job(scenario, field.path))
      fields.emplace_back(std::string(field.path), field.write(scenario));
  return fields;
}

std::string job_digest(const std::vector<std::pair<std::string, std::string>>& fields) {
  Digest digest;
  for (const auto& [path, value] : fields) {
    // Lengths first, so no two lists of fields run together into the same bytes.
    digest.update_u64(path.size());
    digest.update(std::as_bytes(std::span(path.data(), path.size())));
    digest.update_u64(value.size());
    digest.update(std::as_bytes(std::span(value.data(), value.size())));
  }
  return digest.hex();
}

std::string job_digest(const Scenario& scenario) {
  return job_digest(job_fields(scenario));
}

std::string scenario_reference_markdown() {
  const Scenario defaults;
  std::string out;
  std::string_view table = "-";  // no table yet
  for (const Field& field : Schema::get().fields()) {
    const std::string_view field_table = parent_of(field.path);
    if (field_table != table) {
      table = field_table;
      out += out.empty() ? "" : "\n";
      out += table.empty() ? std::string("### Top level\n\n") : "### `[" + std::string(table) + "]`\n\n";
      out += "| Field | Type | Default | Meaning |\n|---|---|---|---|\n";
    }
    out += "| `" + std::string(field.path) + "` | " + markdown_cell(field.type) + " | `" +
           markdown_cell(field.write(defaults)) + "` | " + markdown_cell(field.doc) + " |\n";
  }
  return out;
}

}  // namespace pstwin
