// Pre-tokenizers (Split, ByteLevel) over UnicodeRegex. HF applies each step of a Sequence to every piece
// the previous step produced, and ByteLevel's add_prefix_space to every piece it receives; both are kept.
#include "format/pretokenizer.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/utf8.h"
#include "format/unicode_regex.h"

namespace deepinfer {

using nlohmann::json;

namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is true (HF pre_tokenizers/byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::unique_ptr<UnicodeRegex> regex;  // Split pattern, or ByteLevel's GPT-2 pattern (null when use_regex=false)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel only

  // HF NormalizedString::split: matches -> (range, is_match) cover, then the behaviour, then drop empties.
  void split_one(std::string_view text, bool new_cps, std::vector<std::pair<uint32_t, uint32_t>>* ranges) const {
    thread_local std::vector<std::pair<uint32_t, uint32_t>> matches;
    thread_local std::vector<std::tuple<uint32_t, uint32_t, bool>> cover;
    matches.clear();
    cover.clear();
    regex->find_all(text, new_cps, &matches);
    uint32_t prev = 0;
    for (auto [b, e] : matches) {
      if (prev != b) cover.emplace_back(prev, b, false);
      cover.emplace_back(b, e, true);
      prev = e;
    }
    if (prev != text.size()) cover.emplace_back(prev, static_cast<uint32_t>(text.size()), false);
    if (invert) {
      for (auto& c : cover) std::get<2>(c) = !std::get<2>(c);
    }
    // Each output range; `removed` ranges are dropped.
    thread_local std::vector<std::tuple<uint32_t, uint32_t, bool>> out;  // (begin, end, removed)
    out.clear();
    bool previous_match = false;
    switch (behavior) {
      case SplitBehavior::kIsolated:
        for (auto [b, e, m] : cover) out.emplace_back(b, e, false);
        break;
      case SplitBehavior::kRemoved:
        for (auto [b, e, m] : cover) out.emplace_back(b, e, m);
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (auto [b, e, m] : cover) {
          if (m && !previous_match && !out.empty()) std::get<1>(out.back()) = e;
          else out.emplace_back(b, e, false);
          previous_match = m;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        for (size_t k = cover.size(); k-- > 0;) {
          auto [b, e, m] = cover[k];
          if (m && !previous_match && !out.empty()) std::get<0>(out.back()) = b;
          else out.emplace_back(b, e, false);
          previous_match = m;
        }
        std::reverse(out.begin(), out.end());
        break;
      case SplitBehavior::kContiguous:
        for (auto [b, e, m] : cover) {
          if (m == previous_match && !out.empty()) std::get<1>(out.back()) = e;
          else out.emplace_back(b, e, false);
          previous_match = m;
        }
        break;
    }
    for (auto [b, e, removed] : out) {
      if (!removed && b != e) ranges->emplace_back(b, e);
    }
  }

  void apply(const PreToken& in, bool new_cps, std::vector<PreToken>* out) const {
    thread_local std::vector<std::pair<uint32_t, uint32_t>> ranges;
    ranges.clear();
    if (kind == Kind::kSplit) {
      split_one(in.text, new_cps, &ranges);
      for (auto [b, e] : ranges) out->push_back({in.text.substr(b, e - b), false});
      return;
    }
    // ByteLevel: optional prefix space, then the optional GPT-2 split, on " " + text.
    const bool add_space = add_prefix_space && !(in.text.size() > 0 && in.text[0] == ' ');
    if (regex == nullptr) {
      out->push_back({in.text, add_space});
      return;
    }
    if (!add_space) {
      split_one(in.text, new_cps, &ranges);
      for (auto [b, e] : ranges) out->push_back({in.text.substr(b, e - b), false});
      return;
    }
    thread_local std::string spaced;
    spaced.clear();
    spaced.push_back(' ');
    spaced.append(in.text);
    split_one(spaced, new_cps, &ranges);
    for (auto [b, e] : ranges) {
      if (b == 0) out->push_back({in.text.substr(0, e - 1), true});
      else out->push_back({in.text.substr(b - 1, e - b), false});
    }
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::from_json(const json& j, const std::string& where) {
  PreTokenizer pre;
  if (j.is_null()) return pre;
  std::vector<std::unique_ptr<Step>> steps;
  const std::string ctx = where + ": pre_tokenizer";
  if (!j.is_object()) return Status::error(ctx + " is not an object");
  const std::string type = j.value("type", std::string());
  std::vector<const json*> flat;
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return Status::error(ctx + ".pretokenizers is missing");
    }
    for (const json& s : j["pretokenizers"]) flat.push_back(&s);
  } else {
    flat.push_back(&j);
  }
  for (size_t k = 0; k < flat.size(); ++k) {
    const json& s = *flat[k];
    const std::string here = ctx + (type == "Sequence" ? ".pretokenizers[" + std::to_string(k) + "]" : "");
    const std::string t = s.is_object() ? s.value("type", std::string()) : std::string();
    if (pre.byte_level_) return Status::error(here + ": '" + t + "' after ByteLevel is not supported");
    auto step = std::make_unique<Step>();
    if (t == "Split") {
      step->kind = Step::Kind::kSplit;
      if (!s.contains("pattern") || !s["pattern"].is_object()) return Status::error(here + ".pattern is missing");
      const json& pat = s["pattern"];
      std::string pattern;
      if (pat.contains("Regex") && pat["Regex"].is_string()) {
        pattern = pat["Regex"].get<std::string>();
      } else if (pat.contains("String") && pat["String"].is_string()) {
        pattern = escape_literal(pat["String"].get<std::string>());
      } else {
        return Status::error(here + ".pattern has neither Regex nor String");
      }
      if (!utf8_is_valid(pattern)) return Status::error(here + ".pattern is not valid UTF-8");
      auto regex = UnicodeRegex::compile_onig(pattern);
      if (!regex.ok()) return Status::error(here + ": " + regex.status().message());
      step->regex = std::move(*regex);
      const std::string behavior = s.value("behavior", std::string("Isolated"));
      if (behavior == "Removed") step->behavior = SplitBehavior::kRemoved;
      else if (behavior == "Isolated") step->behavior = SplitBehavior::kIsolated;
      else if (behavior == "MergedWithPrevious") step->behavior = SplitBehavior::kMergedWithPrevious;
      else if (behavior == "MergedWithNext") step->behavior = SplitBehavior::kMergedWithNext;
      else if (behavior == "Contiguous") step->behavior = SplitBehavior::kContiguous;
      else return Status::error(here + ".behavior '" + behavior + "' is unknown");
      step->invert = s.value("invert", false);
    } else if (t == "ByteLevel") {
      step->kind = Step::Kind::kByteLevel;
      step->add_prefix_space = s.value("add_prefix_space", true);
      if (s.value("use_regex", true)) {
        auto regex = UnicodeRegex::compile_onig(kGpt2Pattern);
        if (!regex.ok()) return Status::error(here + ": " + regex.status().message());
        step->regex = std::move(*regex);
      }
      step->behavior = SplitBehavior::kIsolated;
      pre.byte_level_ = true;
    } else {
      return Status::error(here + ": pre-tokenizer type '" + t + "' is not supported (Split, ByteLevel, Sequence are)");
    }
    steps.push_back(std::move(step));
  }
  pre.steps_ = std::move(steps);
  return pre;
}

void PreTokenizer::split(std::string_view segment, bool may_have_new_code_points, std::vector<PreToken>* out) const {
  if (segment.empty()) return;
  if (steps_.empty()) {
    out->push_back({segment, false});
    return;
  }
  thread_local std::vector<PreToken> a, b;
  a.clear();
  a.push_back({segment, false});
  for (size_t k = 0; k < steps_.size(); ++k) {
    std::vector<PreToken>* dst = k + 1 == steps_.size() ? out : &b;
    if (dst == &b) b.clear();
    for (const PreToken& piece : a) steps_[k]->apply(piece, may_have_new_code_points, dst);
    if (dst == &b) std::swap(a, b);
  }
}

}  // namespace deepinfer
