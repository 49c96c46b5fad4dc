#include "model/teacher_forcing.h"

#include <algorithm>
#include <cstring>

#include "format/safetensors.h"

namespace deepinfer {

Result<GoldenCase> load_golden_case(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) return file.status();
  const SafetensorsFile& f = *file.value();
  GoldenCase gc;
  auto read_ids = [&](const char* name, std::vector<int32_t>* out) -> Status {
    const TensorView* t = f.find(name);
    if (!t) return Status::error(path + ": missing tensor '" + name + "'");
    if (t->dtype != DType::kI32 || t->shape.size() != 1) return Status::error(path + ": tensor '" + std::string(name) + "' must be I32 [n]");
    out->resize(size_t(t->numel()));
    std::memcpy(out->data(), t->data, t->n_bytes);  // tensors may sit at misaligned offsets
    return Status();
  };
  auto read_f32 = [&](const std::string& name, std::vector<float>* out) -> Status {
    const TensorView* t = f.find(name);
    if (!t) return Status();
    if (t->dtype != DType::kF32) return Status::error(path + ": tensor '" + name + "' must be F32");
    out->resize(size_t(t->numel()));
    std::memcpy(out->data(), t->data, t->n_bytes);
    return Status();
  };
  DI_RETURN_IF_ERROR(read_ids("prompt", &gc.prompt));
  DI_RETURN_IF_ERROR(read_ids("continuation", &gc.continuation));
  if (gc.prompt.empty()) return Status::error(path + ": empty prompt");
  DI_RETURN_IF_ERROR(read_f32("logits", &gc.logits));
  DI_RETURN_IF_ERROR(read_f32("mtp_logits", &gc.mtp_logits));
  DI_RETURN_IF_ERROR(read_f32("dspark_logits", &gc.dspark_logits));
  DI_RETURN_IF_ERROR(read_f32("dspark_confidence", &gc.dspark_confidence));
  if (f.find("dspark_anchor")) DI_RETURN_IF_ERROR(read_ids("dspark_anchor", &gc.dspark_anchor));
  if (const TensorView* t = f.find("dspark_tokens"); t && t->dtype == DType::kI32) {
    gc.dspark_tokens.resize(size_t(t->numel()));
    std::memcpy(gc.dspark_tokens.data(), t->data, t->n_bytes);
  }
  if (auto it = f.metadata().find("index_k"); it != f.metadata().end()) gc.index_k = it->second;
  for (int l = 0;; ++l) {
    std::vector<float> h;
    DI_RETURN_IF_ERROR(read_f32("hidden." + std::to_string(l), &h));
    if (h.empty()) break;
    gc.hidden.push_back(std::move(h));
  }
  return gc;
}

TeacherForcedResult run_teacher_forced(Model& model, const std::vector<int32_t>& prompt,
                                       const std::vector<int32_t>& continuation, const TeacherForcedOptions& options) {
  const ModelConfig& c = model.config();
  const int64_t P = int64_t(prompt.size()), C = int64_t(continuation.size()), V = c.vocab_size, D = c.dim;
  TeacherForcedResult result;
  SequenceState seq = model.new_sequence();
  const bool mtp = options.mtp && c.n_mtp_layers > 0 && !c.is_v41();
  const bool dspark = options.dspark && c.is_v41();
  std::vector<float> prompt_hidden;  // [P, 4, D] for the MTP prefill
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : P;
  for (int64_t p0 = 0; p0 < P; p0 += chunk) {
    const int64_t n = std::min(chunk, P - p0);
    ForwardChunk fc;
    fc.state = &seq;
    fc.ids = std::span<const int32_t>(prompt.data() + p0, size_t(n));
    fc.prompt_len = P;
    fc.keep_hidden = mtp || dspark;
    const bool last_chunk = p0 + n == P;
    if (last_chunk) fc.layer_streams_of_last = &result.layer_streams;
    auto out = model.forward(std::span<const ForwardChunk>(&fc, 1));
    if (mtp) prompt_hidden.insert(prompt_hidden.end(), out[0].hidden.begin(), out[0].hidden.end());
    // The prefill only seeds the stage rings (after an SWA bounded replay: from the chunk's tail on).
    if (dspark) model.dspark_seed(seq, p0 + out[0].hidden_first_token, out[0].hidden);
    if (last_chunk) result.logits.insert(result.logits.end(), out[0].logits.begin(), out[0].logits.end());
  }
  if (mtp && C > 0) {
    // MTP prefill: positions 0..P-1 fed with ids prompt[1:] + [continuation[0]] (row 0 = last position).
    std::vector<int32_t> next_ids(prompt.begin() + 1, prompt.end());
    next_ids.push_back(continuation[0]);
    for (int64_t p0 = 0; p0 < P; p0 += chunk) {
      const int64_t n = std::min(chunk, P - p0);
      MtpChunk mc;
      mc.state = &seq;
      mc.hidden = std::span<const float>(prompt_hidden.data() + p0 * 4 * D, size_t(n * 4 * D));
      mc.next_ids = std::span<const int32_t>(next_ids.data() + p0, size_t(n));
      mc.prompt_len = P;
      auto out = model.forward_mtp(std::span<const MtpChunk>(&mc, 1));
      if (p0 + n == P) result.mtp_logits.insert(result.mtp_logits.end(), out[0].logits.begin(), out[0].logits.end());
    }
  }
  for (int64_t i = 0; i < C; ++i) {
    ForwardChunk fc;
    fc.state = &seq;
    fc.ids = std::span<const int32_t>(&continuation[size_t(i)], 1);
    fc.keep_hidden = (mtp && i + 1 < C) || dspark;
    auto out = model.forward(std::span<const ForwardChunk>(&fc, 1));
    result.logits.insert(result.logits.end(), out[0].logits.begin(), out[0].logits.end());
    if (dspark) {  // after decode step i + 1 at position P + i: anchor = argmax of its logits
      const int64_t pos = P + i;
      model.dspark_seed(seq, pos, out[0].hidden);
      const int64_t B1 = c.dspark_block_size + 1;
      const int32_t anchor = options.forced_dspark_anchor ? (*options.forced_dspark_anchor)[size_t(i)]
                                                          : int32_t(argmax(out[0].logits.data(), c.vocab_size));
      std::span<const int32_t> chain;
      if (options.forced_dspark_tokens) chain = std::span<const int32_t>(options.forced_dspark_tokens->data() + i * B1, size_t(B1));
      DsparkDraft draft = model.dspark_draft(seq, pos, anchor, chain);
      result.dspark_anchor.push_back(anchor);
      result.dspark_tokens.insert(result.dspark_tokens.end(), draft.tokens.begin(), draft.tokens.end());
      result.dspark_logits.insert(result.dspark_logits.end(), draft.logits.begin(), draft.logits.end());
      result.dspark_confidence.insert(result.dspark_confidence.end(), draft.confidence.begin(), draft.confidence.end());
    }
    if (mtp && i + 1 < C) {
      MtpChunk mc;
      mc.state = &seq;
      mc.hidden = out[0].hidden;
      mc.next_ids = std::span<const int32_t>(&continuation[size_t(i + 1)], 1);
      auto mtp_out = model.forward_mtp(std::span<const MtpChunk>(&mc, 1));
      result.mtp_logits.insert(result.mtp_logits.end(), mtp_out[0].logits.begin(), mtp_out[0].logits.end());
    }
  }
  (void)V;
  return result;
}

}  // namespace deepinfer
