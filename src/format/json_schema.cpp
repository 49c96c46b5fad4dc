#include "format/json_schema.h"

#include <map>
#include <set>

namespace deepinfer {

namespace {

using Json = nlohmann::ordered_json;

constexpr uint8_t kAllKinds = (1u << kNumJsonKinds) - 1;

uint8_t kind_bit(JsonKind k) { return uint8_t(1u << int(k)); }

// Keywords that only describe (they constrain nothing), so ignoring them loses nothing.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                            "deprecated", "readOnly", "writeOnly", "$anchor"};
// Keywords that only make sense next to each other and are checked as a group below.
const std::set<std::string> kSupported = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                          "items", "minItems", "maxItems", "$ref", "anyOf", "$defs", "definitions"};

// JSON Pointer escaping of one path segment (RFC 6901).
std::string pointer_segment(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

const char* kind_name(int k) {
  static const char* names[kNumJsonKinds] = {"null", "boolean", "number", "string", "array", "object"};
  return names[k];
}

JsonKind kind_of(const Json& v) {
  if (v.is_null()) return JsonKind::kNull;
  if (v.is_boolean()) return JsonKind::kBool;
  if (v.is_number()) return JsonKind::kNumber;
  if (v.is_string()) return JsonKind::kString;
  if (v.is_array()) return JsonKind::kArray;
  return JsonKind::kObject;
}

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  Result<CompiledJsonSchema> run() {
    Result<int32_t> root = compile(root_, "#");
    if (!root.ok()) return root.status();
    for (int32_t i = 0; i < int32_t(nodes_.size()); ++i) DI_RETURN_IF_ERROR(resolve_kinds(i));
    prune_unsatisfiable();
    CompiledJsonSchema out;
    out.root = *root;
    bool any = false;
    for (int32_t t : nodes_[size_t(out.root)].by_kind) any = any || t >= 0;
    if (!any) return Status::error("#: no JSON value satisfies this schema");
    out.nodes = std::move(nodes_);
    return out;
  }

 private:
  static Status error_at(const std::string& path, const std::string& message) { return Status::error(path + ": " + message); }

  int32_t new_node(const std::string& path) {
    nodes_.emplace_back();
    branches_.emplace_back();
    own_kinds_.push_back(0);
    paths_.push_back(path);
    state_.push_back(0);
    return int32_t(nodes_.size()) - 1;
  }

  Result<int32_t> compile(const Json& s, const std::string& path) {
    const int32_t idx = new_node(path);
    DI_RETURN_IF_ERROR(compile_into(idx, s, path));
    return idx;
  }

  // The node for "#", "#/$defs/x" or "#/definitions/x", compiled once (a recursive reference finds it allocated).
  Result<int32_t> resolve_ref(const Json& ref, const std::string& path) {
    if (!ref.is_string()) return error_at(path, "must be a string");
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const Json* node = nullptr;
    if (target == "#") {
      node = &root_;
    } else {
      for (const char* container : {"#/$defs/", "#/definitions/"}) {
        const std::string prefix = container;
        if (target.rfind(prefix, 0) != 0) continue;
        const std::string name = target.substr(prefix.size());
        const std::string key = prefix.substr(2, prefix.size() - 3);  // "$defs" / "definitions"
        if (name.find('/') != std::string::npos || name.find('~') != std::string::npos) break;
        if (auto defs = root_.find(key); defs != root_.end() && defs->is_object()) {
          if (auto def = defs->find(name); def != defs->end()) node = &*def;
        }
      }
    }
    if (node == nullptr) {
      return error_at(path, "'" + target + "' is not supported (only \"#\", \"#/$defs/<name>\" and \"#/definitions/<name>\" of this schema)");
    }
    const int32_t idx = new_node(target);
    refs_[target] = idx;
    DI_RETURN_IF_ERROR(compile_into(idx, *node, target));
    return idx;
  }

  int32_t any_node() {
    if (any_ < 0) {
      any_ = new_node("true");
      (void)compile_into(any_, Json(true), "true");
    }
    return any_;
  }

  Status compile_into(int32_t idx, const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) {
        own_kinds_[size_t(idx)] = kAllKinds;
        nodes_[size_t(idx)].additional = idx;
        nodes_[size_t(idx)].items = idx;
      }
      return Status();
    }
    if (!s.is_object()) return error_at(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.count(key) != 0) continue;
      if (kSupported.count(key) == 0) {
        return error_at(path, "unsupported keyword '" + key + "' (see the README for the supported JSON Schema subset)");
      }
    }
    if (auto it = s.find("$defs"); it != s.end() && !it->is_object()) return error_at(path + "/$defs", "must be an object");
    if (auto it = s.find("definitions"); it != s.end() && !it->is_object()) return error_at(path + "/definitions", "must be an object");
    // $ref and anyOf make a dispatch node: it takes each kind from one branch. Constraints beside them would need
    // an intersection of schemas, which this subset does not do.
    const bool has_ref = s.contains("$ref"), has_any_of = s.contains("anyOf");
    if (has_ref || has_any_of) {
      for (const auto& [key, value] : s.items()) {
        if (kAnnotations.count(key) != 0 || key == "$defs" || key == "definitions" || key == "$ref" || key == "anyOf") continue;
        return error_at(path, "keyword '" + key + "' next to '" + (has_ref ? "$ref" : "anyOf") + "' is not supported");
      }
      if (has_ref && has_any_of) return error_at(path, "'$ref' next to 'anyOf' is not supported");
      if (has_ref) {
        Result<int32_t> target = resolve_ref(s["$ref"], path + "/$ref");
        if (!target.ok()) return target.status();
        branches_[size_t(idx)].push_back(*target);
        return Status();
      }
      const Json& any_of = s["anyOf"];
      if (!any_of.is_array() || any_of.empty()) return error_at(path + "/anyOf", "must be a non-empty array of schemas");
      for (size_t i = 0; i < any_of.size(); ++i) {
        Result<int32_t> branch = compile(any_of[i], path + "/anyOf/" + std::to_string(i));
        if (!branch.ok()) return branch.status();
        branches_[size_t(idx)].push_back(*branch);
      }
      return Status();
    }

    // type: the kinds allowed (all without it).
    uint8_t kinds = kAllKinds;
    bool integer = true, number = true;
    if (auto it = s.find("type"); it != s.end()) {
      const Json types = it->is_array() ? *it : Json::array({*it});
      if (types.empty()) return error_at(path + "/type", "must be a type name or a non-empty array of type names");
      kinds = 0;
      integer = number = false;
      for (const Json& t : types) {
        const std::string name = t.is_string() ? t.get<std::string>() : "";
        if (name == "null") kinds |= kind_bit(JsonKind::kNull);
        else if (name == "boolean") kinds |= kind_bit(JsonKind::kBool);
        else if (name == "integer") kinds |= kind_bit(JsonKind::kNumber), integer = true;
        else if (name == "number") kinds |= kind_bit(JsonKind::kNumber), number = true;
        else if (name == "string") kinds |= kind_bit(JsonKind::kString);
        else if (name == "array") kinds |= kind_bit(JsonKind::kArray);
        else if (name == "object") kinds |= kind_bit(JsonKind::kObject);
        else return error_at(path + "/type", "unknown type " + t.dump());
      }
    }
    nodes_[size_t(idx)].integer_only = integer && !number;

    // enum / const: a list of exact values, filtered by type. Only type may stand beside them.
    const bool has_enum = s.contains("enum"), has_const = s.contains("const");
    if (has_enum || has_const) {
      for (const char* key : {"properties", "required", "additionalProperties", "items", "minItems", "maxItems"}) {
        if (s.contains(key)) return error_at(path, std::string("keyword '") + key + "' next to 'enum'/'const' is not supported");
      }
      std::vector<Json> values;
      if (has_enum) {
        const Json& e = s["enum"];
        if (!e.is_array()) return error_at(path + "/enum", "must be an array");
        values.assign(e.begin(), e.end());
      }
      if (has_const) {
        const Json& c = s["const"];
        if (has_enum) {
          const bool in_enum = std::find(values.begin(), values.end(), c) != values.end();
          values.clear();
          if (in_enum) values.push_back(c);
        } else {
          values.push_back(c);
        }
      }
      JsonSchemaNode& n = nodes_[size_t(idx)];
      n.has_literals = true;
      uint8_t literal_kinds = 0;
      for (const Json& v : values) {
        const JsonKind k = kind_of(v);
        if ((kinds & kind_bit(k)) == 0) continue;
        if (k == JsonKind::kNumber && nodes_[size_t(idx)].integer_only && !v.is_number_integer()) continue;
        std::string text;
        try {
          text = v.dump();
        } catch (const nlohmann::json::exception&) {
          return error_at(path, "an enum/const value is not valid UTF-8");
        }
        if (std::find(n.literals.begin(), n.literals.end(), text) != n.literals.end()) continue;
        if (int(n.literals.size()) == CompiledJsonSchema::kMaxLiterals) {
          return error_at(path + (has_enum ? "/enum" : "/const"), "more than " + std::to_string(CompiledJsonSchema::kMaxLiterals) + " values are not supported");
        }
        n.literals.push_back(std::move(text));
        literal_kinds |= kind_bit(k);
      }
      own_kinds_[size_t(idx)] = literal_kinds;
      return Status();
    }
    own_kinds_[size_t(idx)] = kinds;

    // Objects.
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) return error_at(path + "/properties", "must be an object");
      if (int(it->size()) > CompiledJsonSchema::kMaxProperties) {
        return error_at(path + "/properties", "more than " + std::to_string(CompiledJsonSchema::kMaxProperties) + " properties are not supported");
      }
      for (const auto& [name, sub] : it->items()) {
        const std::string sub_path = path + "/properties/" + pointer_segment(name);
        for (char c : name) {
          if (c == '"' || c == '\\' || uint8_t(c) < 0x20) return error_at(sub_path, "property names that need JSON escapes are not supported");
        }
        Result<int32_t> child = compile(sub, sub_path);
        if (!child.ok()) return child.status();
        nodes_[size_t(idx)].property_names.push_back(name);
        nodes_[size_t(idx)].property_nodes.push_back(*child);
      }
    }
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return error_at(path + "/required", "must be an array of property names");
      JsonSchemaNode& n = nodes_[size_t(idx)];
      for (const Json& r : *it) {
        const auto pos = r.is_string() ? std::find(n.property_names.begin(), n.property_names.end(), r.get<std::string>()) : n.property_names.end();
        if (pos == n.property_names.end()) {
          return error_at(path + "/required", "required property " + r.dump() + " is not listed in 'properties' (not supported)");
        }
        n.required |= uint64_t(1) << (pos - n.property_names.begin());
      }
    }
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean() && !it->get<bool>()) {
        nodes_[size_t(idx)].additional = -1;
      } else {
        Result<int32_t> child = compile(*it, path + "/additionalProperties");
        if (!child.ok()) return child.status();
        nodes_[size_t(idx)].additional = *child;
      }
    } else {
      const int32_t any = any_node();
      nodes_[size_t(idx)].additional = any;
    }

    // Arrays.
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) return error_at(path + "/items", "an array of schemas (tuple validation) is not supported");
      Result<int32_t> child = compile(*it, path + "/items");
      if (!child.ok()) return child.status();
      nodes_[size_t(idx)].items = *child;
    } else {
      const int32_t any = any_node();
      nodes_[size_t(idx)].items = any;
    }
    for (const char* key : {"minItems", "maxItems"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < 0) return error_at(path + "/" + key, "must be a non-negative integer");
      (std::string(key) == "minItems" ? nodes_[size_t(idx)].min_items : nodes_[size_t(idx)].max_items) = it->get<int64_t>();
    }
    return Status();
  }

  // by_kind: a plain node takes its own kinds; a dispatch node takes each kind from the one branch that has it.
  Status resolve_kinds(int32_t idx) {
    if (state_[size_t(idx)] == 2) return Status();
    if (state_[size_t(idx)] == 1) return error_at(paths_[size_t(idx)], "a '$ref'/'anyOf' cycle that never reaches a type is not supported");
    state_[size_t(idx)] = 1;
    std::array<int32_t, kNumJsonKinds> by_kind{-1, -1, -1, -1, -1, -1};
    if (branches_[size_t(idx)].empty()) {
      for (int k = 0; k < kNumJsonKinds; ++k) {
        if (own_kinds_[size_t(idx)] & (1u << k)) by_kind[size_t(k)] = idx;
      }
    }
    for (size_t b = 0; b < branches_[size_t(idx)].size(); ++b) {
      const int32_t branch = branches_[size_t(idx)][b];
      DI_RETURN_IF_ERROR(resolve_kinds(branch));
      for (int k = 0; k < kNumJsonKinds; ++k) {
        const int32_t target = nodes_[size_t(branch)].by_kind[size_t(k)];
        if (target < 0) continue;
        if (by_kind[size_t(k)] >= 0 && by_kind[size_t(k)] != target) {
          return error_at(paths_[size_t(idx)] + "/anyOf", std::string("two branches accept ") + kind_name(k) +
                                                               " values; only anyOf branches of distinct JSON types are supported");
        }
        by_kind[size_t(k)] = target;
      }
    }
    nodes_[size_t(idx)].by_kind = by_kind;
    state_[size_t(idx)] = 2;
    return Status();
  }

  // Least fixpoint of "a complete value of kind k exists" over the plain nodes (recursion makes it a fixpoint),
  // then every reference to a kind that cannot be completed is cut.
  void prune_unsatisfiable() {
    const size_t n = nodes_.size();
    std::vector<uint8_t> sat(n, 0);
    auto value_possible = [&](int32_t node) {
      if (node < 0) return false;
      for (int k = 0; k < kNumJsonKinds; ++k) {
        const int32_t t = nodes_[size_t(node)].by_kind[size_t(k)];
        if (t >= 0 && (sat[size_t(t)] & (1u << k))) return true;
      }
      return false;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < n; ++i) {
        if (!branches_[i].empty()) continue;
        const JsonSchemaNode& node = nodes_[i];
        for (int k = 0; k < kNumJsonKinds; ++k) {
          if (!(own_kinds_[i] & (1u << k)) || (sat[i] & (1u << k))) continue;
          bool ok = true;
          if (!node.has_literals && k == int(JsonKind::kArray)) {
            ok = node.min_items <= node.max_items && (node.min_items == 0 || value_possible(node.items));
          } else if (!node.has_literals && k == int(JsonKind::kObject)) {
            for (size_t p = 0; p < node.property_nodes.size(); ++p) {
              if ((node.required >> p) & 1) ok = ok && value_possible(node.property_nodes[p]);
            }
          }
          if (ok) {
            sat[i] |= uint8_t(1u << k);
            changed = true;
          }
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      for (int k = 0; k < kNumJsonKinds; ++k) {
        int32_t& t = nodes_[i].by_kind[size_t(k)];
        if (t >= 0 && !(sat[size_t(t)] & (1u << k))) t = -1;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      JsonSchemaNode& node = nodes_[i];
      for (size_t p = 0; p < node.property_nodes.size(); ++p) {
        if (value_possible(node.property_nodes[p])) node.viable_properties |= uint64_t(1) << p;
      }
      if (!value_possible(node.additional)) node.additional = -1;
      if (!value_possible(node.items)) node.items = -1;
    }
  }

  const Json& root_;
  std::vector<JsonSchemaNode> nodes_;
  std::vector<std::vector<int32_t>> branches_;  // per node: anyOf branches / the $ref target
  std::vector<uint8_t> own_kinds_;              // per node: the kinds a plain node accepts
  std::vector<std::string> paths_;              // per node: where it came from (for messages)
  std::vector<uint8_t> state_;                  // per node: resolve_kinds visit state (0 new, 1 open, 2 done)
  std::map<std::string, int32_t> refs_;
  int32_t any_ = -1;
};

}  // namespace

Result<CompiledJsonSchema> compile_json_schema(const nlohmann::ordered_json& schema) {
  return Compiler(schema).run();
}

}  // namespace deepinfer
