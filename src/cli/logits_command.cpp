// `deepinfer logits`: teacher-forced evaluation of a golden-format case file, written as safetensors.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "format/safetensors.h"
#include "model/teacher_forcing.h"

namespace deepinfer::cli {

namespace {
TensorToWrite f32_tensor(const std::string& name, const std::vector<float>& values, int64_t rows, int64_t cols) {
  TensorToWrite t{name, DType::kF32, {rows, cols}, {}};
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}
}  // namespace

Runner add_logits_command(CLI::App& app) {
  struct Args {
    std::string model, case_path, out;
    int64_t chunk = 0;
    int threads = 0;
    bool exact = false, mtp = false, owner_keys = false, dspark = false, swa_replay = false;
    bool cuda = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "teacher-forced logits of a case file (golden format)");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--case", args->case_path, "case-N.safetensors with prompt and continuation")->required();
  cmd->add_option("--out", args->out, "output safetensors (F32 logits [1 + C, vocab])")->required();
  cmd->add_option("--chunk", args->chunk, "prefill chunk size (0 = whole prompt)");
  cmd->add_option("--threads", args->threads, "threads for the fast kernels (0 = all)");
  cmd->add_flag("--exact", args->exact, "reference kernels: exact, double accumulation (golden contract)");
  add_backend_option(cmd, &args->cuda);
  cmd->add_flag("--mtp", args->mtp, "also write mtp_logits [C, vocab]");
  cmd->add_flag("--dspark", args->dspark, "V4.1: also write the DSpark draft outputs (dspark_anchor/tokens/logits/confidence)");
  cmd->add_flag("--index-owner-keys", args->owner_keys,
                "V4.1: every index source scores against its own KV owner's keys (default: the reference's republish "
                "behaviour, or what the case's index_k label says)");
  cmd->add_flag("--swa-replay", args->swa_replay, "V4.1: SWA bounded replay in prefill (spec 7.10): the decoder layers run only on the last window + DSpark-block tokens (faster, approximate; off = exact)");
  return [args]() {
    auto gc = load_golden_case(args->case_path);
    if (!gc.ok()) {
      std::fprintf(stderr, "error: %s\n", gc.status().message().c_str());
      return 1;
    }
    // A case labelled index_k=owner was produced with the owner-keys behaviour: follow its label unless told.
    const bool owner_keys = args->owner_keys || gc->index_k == "owner";
    if (owner_keys && !args->owner_keys) {
      std::fprintf(stderr, "note: %s is labelled index_k=owner: using the owner-keys behaviour\n", args->case_path.c_str());
    } else if (args->owner_keys && gc->index_k == "reference-quirk") {
      std::fprintf(stderr, "warning: %s is labelled index_k=reference-quirk, but --index-owner-keys was given\n",
                   args->case_path.c_str());
    }
    ModelOptions options;
    options.exact = args->exact;
    options.n_threads = args->threads;
    options.cuda = args->cuda;
    options.index_owner_keys = owner_keys;
    options.swa_bounded_replay = args->swa_replay;
    options.show_progress = isatty(STDERR_FILENO) != 0;
    auto model = Model::open(args->model, options);
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    const ModelConfig& c = model.value()->config();
    for (const auto* ids : {&gc->prompt, &gc->continuation}) {
      if (Status st = model.value()->validate_tokens(*ids); !st.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", args->case_path.c_str(), st.message().c_str());
        return 1;
      }
    }
    TeacherForcedOptions tf;
    tf.prefill_chunk = args->chunk;
    tf.mtp = args->mtp;
    tf.dspark = args->dspark;
    if (args->dspark && !c.is_v41()) {
      std::fprintf(stderr, "error: --dspark needs a V4.1 checkpoint (%s is model_type deepseek_v4)\n", args->model.c_str());
      return 1;
    }
    if (args->mtp && c.n_mtp_layers == 0) {
      std::fprintf(stderr, "error: %s has no MTP layer (num_nextn_predict_layers = 0)\n", args->model.c_str());
      return 1;
    }
    TeacherForcedResult r = run_teacher_forced(*model.value(), gc->prompt, gc->continuation, tf);
    const int64_t V = c.vocab_size, C = int64_t(gc->continuation.size());
    std::vector<TensorToWrite> tensors;
    tensors.push_back(f32_tensor("logits", r.logits, 1 + C, V));
    if (args->mtp) tensors.push_back(f32_tensor("mtp_logits", r.mtp_logits, C, V));
    if (args->dspark) {
      const int64_t B = c.dspark_block_size;
      auto i32_tensor = [](const std::string& name, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
        TensorToWrite t{name, DType::kI32, std::move(shape), {}};
        t.bytes.resize(v.size() * sizeof(int32_t));
        std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
        return t;
      };
      tensors.push_back(i32_tensor("dspark_anchor", r.dspark_anchor, {C}));
      tensors.push_back(i32_tensor("dspark_tokens", r.dspark_tokens, {C, B + 1}));
      TensorToWrite dl = f32_tensor("dspark_logits", r.dspark_logits, C * B, V);
      dl.shape = {C, B, V};
      tensors.push_back(std::move(dl));
      tensors.push_back(f32_tensor("dspark_confidence", r.dspark_confidence, C, B));
    }
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<float> h(r.layer_streams.begin() + int64_t(l) * 4 * c.dim, r.layer_streams.begin() + int64_t(l + 1) * 4 * c.dim);
      tensors.push_back(f32_tensor("hidden." + std::to_string(l), h, 4, c.dim));
    }
    Status st = write_safetensors(args->out, tensors);
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.message().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace deepinfer::cli
