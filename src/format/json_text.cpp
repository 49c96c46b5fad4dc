// JSON writer matching deepseek-recipe's serde_json output byte for byte (see json_text.h).
#include "format/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

namespace deepinfer {

void json_escape_append(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (byte) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (byte < 0x20) {
          out += "\\u00";
          out += kHex[byte >> 4];
          out += kHex[byte & 0xF];
        } else {
          out += c;
        }
    }
  }
}

namespace {

// The f64 layout of serde_json (ryu "pretty" format) from the shortest round-trip digits.
std::string serde_float_text(double value) {
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // "-d.ddde+XX"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  const int exp10 = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int n_digits = static_cast<int>(digits.size());
  const int k = exp10 - (n_digits - 1);  // value = digits * 10^k
  const int kk = n_digits + k;           // 10^(kk-1) <= |value| < 10^kk
  if (k >= 0 && kk <= 16) {
    out += digits;
    out.append(static_cast<size_t>(k), '0');
    out += ".0";
  } else if (kk > 0 && kk <= 16) {
    out += digits.substr(0, static_cast<size_t>(kk));
    out += '.';
    out += digits.substr(static_cast<size_t>(kk));
  } else if (kk > -5 && kk <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-kk), '0');
    out += digits;
  } else {
    out += digits[0];
    if (n_digits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += kk - 1 >= 0 ? "e+" : "e";  // serde_json (zmij) writes an explicit '+'
    out += std::to_string(kk - 1);
  }
  return out;
}

// Python `json.dumps` spellings of small floats, applied to the serde_json text as the V4.1 encoder does:
// below 1e-4 in exponent form, and negative exponents with at least two digits.
std::string python_float_text(const std::string& serde) {
  if (serde.find('e') == std::string::npos) {
    const bool negative = !serde.empty() && serde[0] == '-';
    const std::string_view rest = std::string_view(serde).substr(negative ? 1 : 0);
    if (rest.substr(0, 2) == "0.") {
      const std::string_view fraction = rest.substr(2);
      size_t n_zeros = 0;
      while (n_zeros < fraction.size() && fraction[n_zeros] == '0') ++n_zeros;
      if (n_zeros >= 4 && n_zeros < fraction.size()) {
        std::string out = negative ? "-" : "";
        out += fraction[n_zeros];
        const std::string_view rest_digits = fraction.substr(n_zeros + 1);
        if (!rest_digits.empty()) {
          out += '.';
          out += rest_digits;
        }
        const size_t exponent = n_zeros + 1;
        out += exponent < 10 ? "e-0" : "e-";
        out += std::to_string(exponent);
        return out;
      }
    }
    return serde;
  }
  const size_t n = serde.size();
  if (n >= 3 && serde[n - 3] == 'e' && serde[n - 2] == '-') {
    return serde.substr(0, n - 3) + "e-0" + serde.substr(n - 1);
  }
  return serde;
}

void dump_to(std::string& out, const nlohmann::ordered_json& value, JsonStyle style) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null: out += "null"; break;
    case Type::boolean: out += value.get<bool>() ? "true" : "false"; break;
    case Type::number_integer: out += std::to_string(value.get<int64_t>()); break;
    case Type::number_unsigned: out += std::to_string(value.get<uint64_t>()); break;
    case Type::number_float: out += json_float_text(value.get<double>(), style); break;
    case Type::string:
      out += '"';
      json_escape_append(out, value.get_ref<const std::string&>());
      out += '"';
      break;
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        dump_to(out, item, style);
      }
      out += ']';
      break;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        json_escape_append(out, it.key());
        out += "\": ";
        dump_to(out, it.value(), style);
      }
      out += '}';
      break;
    }
    case Type::binary:
    case Type::discarded: out += "null"; break;
  }
}

}  // namespace

std::string json_float_text(double value, JsonStyle style) {
  std::string serde = serde_float_text(value);
  return style == JsonStyle::kPython ? python_float_text(serde) : serde;
}

std::string json_dump(const nlohmann::ordered_json& value, JsonStyle style) {
  std::string out;
  dump_to(out, value, style);
  return out;
}

}  // namespace deepinfer
