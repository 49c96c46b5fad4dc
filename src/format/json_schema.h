// JSON Schema → a compiled node graph that the schema prefix validator (format/json_schema_prefix.h) walks. It
// owns the supported subset and says no, by keyword and JSON-pointer path, to everything else: a constraint that
// is not enforced is never silently dropped (only annotations such as title/description/default are ignored).
// Supported: type (one or a list), properties, required, additionalProperties (bool or schema), items (one schema),
// minItems, maxItems, enum, const, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed), and
// anyOf whose branches accept distinct JSON kinds (e.g. a type and null). Invariants: every node's by_kind entry
// is -1 or a node that can produce at least one complete value of that kind (unsatisfiable branches are pruned at
// compile time, so the validator never starts a value it cannot finish).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// The kind of a JSON value, which its first byte decides: n, t/f, - or digit, ", [, {.
enum class JsonKind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
inline constexpr int kNumJsonKinds = 6;

struct JsonSchemaNode {
  // The node that governs a value of each kind starting here (itself, an anyOf branch, a $ref target), or -1
  // when a value of that kind is not allowed (or could never be completed).
  std::array<int32_t, kNumJsonKinds> by_kind{-1, -1, -1, -1, -1, -1};
  bool integer_only = false;          // numbers: type integer without number (no fraction, no exponent)
  // enum / const: the value must be one of these texts byte for byte (compact JSON as nlohmann dumps it).
  bool has_literals = false;
  std::vector<std::string> literals;  // at most kMaxLiterals
  // Objects. Keys are matched on their raw bytes (the validator refuses escapes in keys).
  std::vector<std::string> property_names;  // at most kMaxProperties, no two alike
  std::vector<int32_t> property_nodes;
  uint64_t required = 0;                    // bit i: property_names[i] is required
  uint64_t viable_properties = 0;           // bit i: property i's value can be completed
  int32_t additional = -1;                  // the node for other keys; -1: no other keys
  // Arrays.
  int32_t items = -1;                       // -1: no item can be completed
  int64_t min_items = 0;
  int64_t max_items = INT64_MAX;
};

struct CompiledJsonSchema {
  static constexpr int kMaxLiterals = 64;    // enum values per node
  static constexpr int kMaxProperties = 64;  // properties per object schema
  std::vector<JsonSchemaNode> nodes;
  int32_t root = 0;
};

// Compiles `schema`; a failure names the unsupported keyword (or malformed value) and its path ("#/properties/a").
[[nodiscard]] Result<CompiledJsonSchema> compile_json_schema(const nlohmann::ordered_json& schema);

}  // namespace deepinfer
