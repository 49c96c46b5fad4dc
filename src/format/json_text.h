// JSON text exactly as DeepSeek's prompt encoder writes it (deepseek-recipe, serde_json with preserve_order):
// `, ` and `: ` separators, keys in insertion order, non-ASCII unescaped, control characters as \u00xx, floats
// in shortest round-trip form laid out the way serde_json does (`1.0`, `0.00001`, `1e-7`, `1.5e+300`).
// JsonStyle::kPython adds the Python `json.dumps` float spellings the V4.1 encoder uses (`1e-05`, `1e-07`).
// Owns no state; never throws (values come from nlohmann, which already holds valid UTF-8).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer {

enum class JsonStyle { kSpaced, kPython };

// Serialises `value` on one line in the chosen style.
std::string json_dump(const nlohmann::ordered_json& value, JsonStyle style);

// Appends the JSON string-content escape of `text` (no surrounding quotes) to `out`. Works byte by byte, so
// escaping a text in pieces gives the same bytes as escaping it whole.
void json_escape_append(std::string& out, std::string_view text);

// A float spelled as serde_json writes an f64 (shortest round trip, ryu layout, explicit + in positive exponents).
std::string json_float_text(double value, JsonStyle style);

}  // namespace deepinfer
