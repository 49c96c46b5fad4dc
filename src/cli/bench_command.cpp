// `deepinfer bench`: prefill and decode throughput of a checkpoint on this machine, printed beside the
// machine's measured ceilings (read bandwidth, peak fp32 FMA and bf16 dot rates) and the bytes / FLOPs each
// phase needs (weight_traffic.h: weights read once per step, expected distinct experts for a batch,
// attention multiply-adds over the visible slots). Figures, not assertions. `bench serve` (the HTTP load test) is
// bench_serve_command.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "backend/timed_backend.h"
#include "cli/bench_serve.h"
#include "core/machine_ceiling.h"
#include "engine/cache_footprint.h"
#include "engine/generation.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "model/weight_traffic.h"

namespace deepinfer::cli {

namespace {
using Clock = std::chrono::steady_clock;

std::vector<int32_t> random_ids(Sampler& rng, int64_t n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int32_t(rng.next_uniform() * vocab);
  return ids;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Reads one byte of every page of every tensor, so a timed phase finds the weights resident (the page
// cache may have dropped pages not touched for a while). Returns the seconds it took.
double prefault_weights(const Checkpoint& checkpoint) {
  const auto t0 = Clock::now();
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  volatile uint8_t sink = 0;
  for (const std::string& name : checkpoint.tensor_names()) {
    const TensorView* t = checkpoint.find(name);
    if (!t || t->n_bytes == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(t->data) / page * page;
    madvise(reinterpret_cast<void*>(begin), reinterpret_cast<uintptr_t>(t->data) + t->n_bytes - begin, MADV_WILLNEED);
    uint8_t acc = 0;
    for (size_t off = 0; off < t->n_bytes; off += page) acc ^= t->data[off];
    sink = sink ^ acc;
  }
  return seconds_since(t0);
}
}  // namespace

Runner add_bench_command(CLI::App& app) {
  struct Args {
    std::string model;
    bool cuda = false;
    std::vector<int64_t> prefill_lens{512};
    std::vector<int> batches{1, 4, 16};
    int decode_steps = 16, threads = 0, context = 16, speculative_tokens = 32;
    float temperature = 0.0f, top_p = 1.0f;
    int logprobs = -1;
    bool exact = false, skip_ceiling = false, no_warmup = false, prefault = false, swa_replay = false, mlock = false;
    bool paired_reads = false, paired_peak = false, op_times = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "prefill / decode tokens per second against the machine's ceilings");
  cmd->add_option("--model", args->model, "checkpoint directory (required unless a subcommand runs)");
  const Runner serve_runner = add_bench_serve_command(*cmd);
  CLI::App* serve_cmd = cmd->get_subcommand("serve");
  cmd->add_option("--prefill", args->prefill_lens, "prompt lengths to time")->delimiter(',');
  cmd->add_option("--batch", args->batches, "decode batch sizes")->delimiter(',');
  cmd->add_option("--decode-steps", args->decode_steps, "decode steps per batch size")->check(CLI::Range(1, 100000));
  cmd->add_option("--context", args->context, "prompt tokens of each sequence before its timed decode steps")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", args->threads, "threads (0 = all)");
  cmd->add_option("--temperature", args->temperature, "every forward's draw at this temperature (0 = greedy)")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-p", args->top_p, "with --temperature: the top-p cut of the whole vocabulary (1 = no cut)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--logprobs", args->logprobs, "every forward's draw with its log-probability and this many most likely ones'")
      ->check(CLI::Range(0, 20));
  cmd->add_option("--speculative-tokens", args->speculative_tokens,
                  "V4.1: greedy tokens generated with and without DSpark speculation (0 = skip)")
      ->check(CLI::Range(0, 100000));
  cmd->add_flag("--exact", args->exact, "time the reference kernels instead");
  add_backend_option(cmd, &args->cuda);
  cmd->add_flag("--swa-replay", args->swa_replay, "V4.1: SWA bounded replay in prefill (spec 7.10): the decoder layers run only on the last window + DSpark-block tokens (faster, approximate; off = exact)");
  cmd->add_flag("--skip-ceiling", args->skip_ceiling, "do not measure bandwidth / peak FMA");
  cmd->add_flag("--paired-reads", args->paired_reads,
                "after each decode step, read the mapped head weights once and report the steps' read rate as a % of "
                "those loops' (robust to a shared host's drift; the steps alone are timed)");
  cmd->add_flag("--paired-peak", args->paired_peak,
                "measure the peak arithmetic rate right before and right after each prefill and report the prefill's "
                "FLOP rate as a % of their mean (robust to a shared host's drift; the prefill alone is timed)");
  cmd->add_flag("--op-times", args->op_times,
                "per phase, how a step's time splits between the backend's op kinds (wall time around each call) "
                "and the model code around them");
  cmd->add_flag("--no-warmup", args->no_warmup, "time the first prefill cold (weights not yet faulted in)");
  cmd->add_flag("--prefault", args->prefault,
                "touch every weight page before each timed phase (all weights resident; resident memory then "
                "shows the whole checkpoint)");
  cmd->add_flag("--mlock", args->mlock,
                "keep the whole checkpoint in RAM (mlock): a page cache reclaimer (e.g. DAMON's pageout on VMs) then "
                "cannot drop the experts a phase has not touched for a while and read them back from disk mid-phase");
  return [args, serve_runner, serve_cmd]() {
    if (serve_cmd->parsed()) return serve_runner();
    if (args->model.empty()) {
      std::fprintf(stderr, "error: bench: --model is required (or `deepinfer bench serve ...`)\n");
      return 1;
    }
    ModelOptions options{.exact = args->exact, .swa_bounded_replay = args->swa_replay, .n_threads = args->threads,
                         .cuda = args->cuda, .show_progress = true, .lock_weights = args->mlock};
    OpTimes op_times{};
    LinearTimes linear_times{};
    if (args->op_times) {
      options.wrap_backend = [&op_times, &linear_times](std::unique_ptr<Backend> selected) -> std::unique_ptr<Backend> {
        return std::make_unique<TimedBackend>(std::move(selected), &op_times, &linear_times);
      };
    }
    auto model = Model::open(args->model, options);
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    Model& m = *model.value();
    const ModelConfig& c = m.config();
    const WeightTraffic traffic = weight_traffic(c);
    // The ceilings are measured before and after the phases (a shared machine's bandwidth drifts); the
    // percentages use the larger of the two, so they can only understate.
    MachineCeiling ceiling;
    if (!args->skip_ceiling) ceiling = measure_machine_ceiling(args->threads);
    const MachineCeiling before = ceiling;
    // This host's read rate moves by up to half from one measurement to the next, and the weights' own pages
    // do not always read as fast as a fresh buffer: each decode phase is bracketed by both read loops (a fresh
    // 1 GB buffer, and the mapped head weights, which every decode step reads), and the % BW column uses the
    // largest read figure of the whole run, so that it can only understate.
    const TensorView* head = m.checkpoint().find("head.weight");
    std::vector<std::string> read_log;  // "where: fresh buffer / head weights GB/s"
    std::vector<std::string> paired_log;  // --paired-peak / --paired-reads, one line per prefill / decode phase
    double read_max = before.read_gb_per_s;
    auto measure_reads = [&](const std::string& where) {
      if (args->skip_ceiling) return;
      const double fresh = measure_machine_ceiling(args->threads, size_t(1) << 30, /*arithmetic=*/false).read_gb_per_s;
      const double weights = head ? measure_read_bandwidth(head->data, head->n_bytes, args->threads) : 0.0;
      read_max = std::max({read_max, fresh, weights});
      char line[160];
      std::snprintf(line, sizeof line, "%s %.1f / %.1f", where.c_str(), fresh, weights);
      read_log.push_back(line);
    };
    std::printf("model %s: %d layers, dim %d, %d experts (%d active), checkpoint %.3f GB, resident %.3f GB\n",
                args->model.c_str(), c.n_layers, c.dim, c.n_routed_experts, c.n_activated_experts,
                traffic.checkpoint_bytes / 1e9, resident_bytes() / 1e9);
    std::printf("backend %s, %d threads\n", m.backend().name(), ceiling.n_threads);
    if (args->swa_replay) {  // the prefill rows' FLOP columns still count every layer on every token
      std::printf("SWA bounded replay on: a prefill runs the decoder layers only on its last %lld tokens "
                  "(GFLOP/s of prefill rows count a full prefill)\n",
                  (long long)plan_swa_replay(c).value().tail_tokens);
    }
    std::printf("weights read per decoded token (batch 1): %.1f MB; weight MACs per token: %.1f M (head %.1f M)\n",
                traffic.decode_bytes_per_token / 1e6, traffic.decode_macs_per_token / 1e6, traffic.head_macs / 1e6);
    Sampler rng(1234);
    struct Row {
      std::string phase;
      double tokens, steps, seconds, bytes, flops;
      OpTimes ops;  // --op-times: the backend's share of the phase
      LinearTimes linear;  // and its linear ops' by weight type
    };
    std::vector<Row> rows;
    // --op-times: a phase's op times are the difference between the totals after it and before it.
    OpTimes ops_before{};
    LinearTimes linear_before{};
    auto phase_start = [&] {
      ops_before = op_times;
      linear_before = linear_times;
    };
    auto since = [](auto after, const auto& before) {  // the totals' growth, entry by entry
      for (size_t k = 0; k < after.size(); ++k) after[k] -= before[k];
      return after;
    };
    auto row = [&](const std::string& phase, double tokens, double steps, double seconds, double bytes, double flops) {
      rows.push_back({phase, tokens, steps, seconds, bytes, flops, since(op_times, ops_before),
                      since(linear_times, linear_before)});
      std::fprintf(stderr, "%s: %.2f tokens/s\n", phase.c_str(), tokens / seconds);
    };
    const int64_t layer_macs = traffic.decode_macs_per_token - traffic.head_macs;

    // Every forward here draws its token itself, greedily or at --temperature, as a server's forwards do for such
    // requests (ForwardChunk::draw_only): the bench has no use for the logits, and a GPU backend then sends one id a
    // token back instead of the vocabulary's logits.
    Sampler sampler(1);
    SamplingParams sampling;
    sampling.temperature = args->temperature;
    sampling.top_p = args->top_p;
    auto drawing_chunk = [&](SequenceState* seq, std::span<const int32_t> ids, int64_t prompt_len) {
      ForwardChunk fc{seq, ids, prompt_len};
      fc.draw_only = true;
      fc.draw = sampler.forward_draw(sampling, c.vocab_size);
      fc.draw.logprobs = args->logprobs;
      return fc;
    };
    // Warm-up, not timed: faults the weights in, and grows the heap to a prefill's working set. The longest
    // prompt, twice: after one warm-up forward of the same length the first timed prefill still page-faulted in
    // fresh heap (V4.1 shapes, 1024 tokens: host time 360-380 ms in the first timed prefill, 80-100 ms in the next
    // ones; perf: clear_page under engram_v41 and moe), which a server pays once, on its first requests.
    if (!args->no_warmup && !args->prefill_lens.empty()) {
      const int64_t longest = *std::max_element(args->prefill_lens.begin(), args->prefill_lens.end());
      for (int i = 0; i < 2; ++i) {
        SequenceState seq = m.new_sequence();
        const auto ids = random_ids(rng, longest, c.vocab_size);
        const ForwardChunk fc = drawing_chunk(&seq, ids, int64_t(ids.size()));
        m.forward(std::span<const ForwardChunk>(&fc, 1));
      }
    }
    auto prefault = [&] {
      if (args->prefault) std::fprintf(stderr, "prefault: %.1f s\n", prefault_weights(m.checkpoint()));
    };
    // The cache bytes sequences really hold (packed formats, SequenceState::cache_bytes) beside the plan's.
    const int64_t fresh_bytes = m.new_sequence().fixed_bytes();
    const CacheFootprint footprint = cache_footprint_of(c, fresh_bytes, kDefaultPageBytes);
    const std::string with_logprobs =
        args->logprobs >= 0 ? ", with log-probabilities (the " + std::to_string(args->logprobs) + " most likely)" : "";
    if (args->temperature > 0.0f) {
      std::printf("Every forward draws at temperature %g, top-p %g%s (ForwardChunk::draw_only): no logits come back%s\n",
                  args->temperature, args->top_p, with_logprobs.c_str(),
                  args->top_p < 1.0f ? " but where a cut lies past the first 1024 candidates" : "");
    } else {
      std::printf("Every forward draws greedily%s (ForwardChunk::draw_only): no logits come back\n", with_logprobs.c_str());
    }
    std::printf("KV cache: %.1f B/token global (compressed rows + index keys, in %lld-byte pool pages), %.3f MB fixed per "
                "sequence (window rings, compressor state)\n", footprint.bytes_per_token(), (long long)kDefaultPageBytes, fresh_bytes / 1e6);
    for (int64_t len : args->prefill_lens) {
      prefault();
      SequenceState seq = m.new_sequence();
      const auto ids = random_ids(rng, len, c.vocab_size);
      const ForwardChunk fc = drawing_chunk(&seq, ids, len);
      const MachineCeiling peak_before = args->paired_peak ? measure_arithmetic_peak(args->threads) : MachineCeiling{};
      phase_start();
      const auto t0 = Clock::now();
      m.forward(std::span<const ForwardChunk>(&fc, 1));
      const double s = seconds_since(t0);
      const MachineCeiling peak_after = args->paired_peak ? measure_arithmetic_peak(args->threads) : MachineCeiling{};
      std::printf("KV cache after a %lld-token prefill: %lld B allocated (%lld fixed + %lld pages of %lld B)\n", (long long)len,
                  (long long)seq.cache_bytes(), (long long)fresh_bytes, (long long)seq.n_pages(), (long long)seq.page_bytes());
      double macs = double(len) * double(layer_macs) + double(traffic.head_macs);  // head: last token only
      for (int64_t t = 0; t < len; ++t) macs += double(attention_macs_at(c, t));
      row("prefill " + std::to_string(len), double(len), 1.0, s, decode_step_bytes(traffic, c, int(len)), 2.0 * macs);
      if (args->paired_peak) {
        // The machine's peak: the larger of its fp32 FMA and bf16 dot rates. Which one the kernels run on depends
        // on the CPU (vdpbf16ps runs at twice the fp32 FMA rate on AMD Zen 4 and 5, at half of it on Intel's
        // Xeons with AVX512-BF16, where the FP8 and FP4 kernels use fp32 FMA), and a prefill is judged against
        // the faster of the two either way.
        const bool bf16 = peak_before.peak_bf16_gflops + peak_after.peak_bf16_gflops >
                          peak_before.peak_gflops + peak_after.peak_gflops;
        const double before_gflops = bf16 ? peak_before.peak_bf16_gflops : peak_before.peak_gflops;
        const double after_gflops = bf16 ? peak_after.peak_bf16_gflops : peak_after.peak_gflops;
        const double step_gflops = 2.0 * macs / s / 1e9, mean = 0.5 * (before_gflops + after_gflops);
        char line[256];
        std::snprintf(line, sizeof line, "prefill %lld: %.1f GFLOP/s against the peak %s rate right before / after it, "
                      "%.1f / %.1f GFLOP/s: %.1f%% of their mean", (long long)len, step_gflops, bf16 ? "bf16 dot" : "fp32 FMA",
                      before_gflops, after_gflops, mean > 0 ? 100.0 * step_gflops / mean : 0.0);
        paired_log.push_back(line);
      }
    }
    for (int batch : args->batches) {
      std::vector<SequenceState> seqs;
      seqs.reserve(size_t(batch));  // the chunks below point into it
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch)), next(static_cast<size_t>(batch));
      for (int b = 0; b < batch; ++b) {
        seqs.push_back(m.new_sequence());
        prompts[size_t(b)] = random_ids(rng, args->context, c.vocab_size);
        next[size_t(b)] = random_ids(rng, args->decode_steps, c.vocab_size);
      }
      // The sequences' prompts (untimed), up to 64 sequences per forward pass: one pass per sequence made the
      // setup of a large batch take longer than its timed steps.
      for (int b0 = 0; b0 < batch; b0 += 64) {
        std::vector<ForwardChunk> chunks;
        for (int b = b0; b < std::min(batch, b0 + 64); ++b) {
          chunks.push_back(drawing_chunk(&seqs[size_t(b)], prompts[size_t(b)], args->context));
        }
        m.forward(chunks);
      }
      double macs = 0;
      prefault();
      measure_reads("before decode batch " + std::to_string(batch));
      const double step_bytes = decode_step_bytes(traffic, c, batch);
      std::vector<double> ratios;  // per step: its read rate / a read loop over the head weights right after it
      double s = 0;
      phase_start();
      for (int step = 0; step < args->decode_steps; ++step) {
        std::vector<ForwardChunk> chunks;
        for (int b = 0; b < batch; ++b) {
          chunks.push_back(drawing_chunk(&seqs[size_t(b)], std::span<const int32_t>(&next[size_t(b)][size_t(step)], 1), 0));
        }
        const auto t0 = Clock::now();
        m.forward(chunks);
        const double step_s = seconds_since(t0);
        s += step_s;
        macs += double(batch) * double(traffic.decode_macs_per_token + attention_macs_at(c, args->context + step));
        if (args->paired_reads && head) {
          ratios.push_back(step_bytes / step_s / measure_read_bandwidth(head->data, head->n_bytes, args->threads, 1) / 1e9);
        }
      }
      measure_reads("after");
      if (!ratios.empty()) {
        std::sort(ratios.begin(), ratios.end());
        auto at = [&](double q) { return 100.0 * ratios[size_t(q * double(ratios.size() - 1) + 0.5)]; };
        char line[256];
        std::snprintf(line, sizeof line, "decode batch %d, each step against a read loop over the head weights right after "
                      "it (%zu pairs): median %.1f%%, quartiles %.1f%% / %.1f%%", batch, ratios.size(), at(0.5), at(0.25), at(0.75));
        paired_log.push_back(line);
      }
      row("decode batch " + std::to_string(batch), double(batch) * args->decode_steps, args->decode_steps, s,
          step_bytes * args->decode_steps, 2.0 * macs);
    }
    // V4.1 DSpark: the same greedy continuation with and without speculation (they must be identical);
    // acceptance and speed-up depend on the weights (random weights accept ~nothing).
    struct Speculation {
      GenerationResult plain, speculative;
    };
    std::optional<Speculation> spec;
    if (c.is_v41() && args->speculative_tokens > 0) {
      const auto prompt = random_ids(rng, args->context, c.vocab_size);
      GenerationOptions options;
      options.max_tokens = args->speculative_tokens;
      options.stop_at_eos = false;
      spec.emplace();
      spec->plain = generate(m, prompt, options);
      options.speculative = true;
      spec->speculative = generate(m, prompt, options);
    }
    if (!args->skip_ceiling) {
      const MachineCeiling after = measure_machine_ceiling(args->threads);
      ceiling.read_gb_per_s = std::max({before.read_gb_per_s, after.read_gb_per_s, read_max});
      ceiling.peak_gflops = std::max(before.peak_gflops, after.peak_gflops);
      ceiling.peak_bf16_gflops = std::max(before.peak_bf16_gflops, after.peak_bf16_gflops);
      std::printf("measured ceilings (before / after the phases): read bandwidth %.1f / %.1f GB/s, peak fp32 FMA "
                  "%.1f / %.1f GFLOP/s, peak bf16 dot %.1f / %.1f GFLOP/s; percentages use the larger\n",
                  before.read_gb_per_s, after.read_gb_per_s, before.peak_gflops, after.peak_gflops,
                  before.peak_bf16_gflops, after.peak_bf16_gflops);
      ceiling.peak_amx_bf16_gflops = std::max(before.peak_amx_bf16_gflops, after.peak_amx_bf16_gflops);
      if (ceiling.peak_amx_bf16_gflops > 0) {
        std::printf("this CPU's AMX bf16 tiles (TDPBF16PS) peak at %.1f / %.1f GFLOP/s, %.1fx its fp32 FMA peak; the "
                    "amxbf16 kernel family runs the linear ops on them (by default a prompt's; DEEPINFER_SIMD=amxbf16: every "
                    "token's; %% amx: against that peak)\n",
                    before.peak_amx_bf16_gflops, after.peak_amx_bf16_gflops,
                    ceiling.peak_amx_bf16_gflops / std::max(1e-9, ceiling.peak_gflops));
      }
      if (!read_log.empty()) {
        std::printf("read bandwidth around the decode phases (fresh buffer / mapped head weights, GB/s):");
        for (size_t i = 0; i < read_log.size(); ++i) std::printf("%s %s", i ? ";" : "", read_log[i].c_str());
        std::printf("; %% BW uses the largest read figure, %.1f GB/s\n", ceiling.read_gb_per_s);
      }
    }
    const bool amx = ceiling.peak_amx_bf16_gflops > 0;
    std::printf("\n%-18s %10s %11s %13s %10s %8s %10s %9s %9s%s\n", "phase", "tokens/s", "ms/step", "MB read/tok",
                "GB/s", "% BW", "GFLOP/s", "% fp32", "% bf16", amx ? "     % amx" : "");
    for (const Row& r : rows) {
      const double gbs = r.bytes / r.seconds / 1e9, gflops = r.flops / r.seconds / 1e9;
      auto pct = [](double x, double of) { return of > 0 ? 100.0 * x / of : 0.0; };
      std::printf("%-18s %10.2f %11.2f %13.1f %10.2f %7.1f%% %10.1f %8.1f%% %8.1f%%", r.phase.c_str(),
                  r.tokens / r.seconds, 1e3 * r.seconds / r.steps, r.bytes / r.tokens / 1e6, gbs,
                  pct(gbs, ceiling.read_gb_per_s), gflops, pct(gflops, ceiling.peak_gflops),
                  pct(gflops, ceiling.peak_bf16_gflops));
      if (amx) std::printf(" %8.1f%%", pct(gflops, ceiling.peak_amx_bf16_gflops));
      std::printf("\n");
    }
    if (args->op_times) {
      // The last column counts the model's calls into the backend, a batch of ops once: a GPU backend waits for
      // the device once per call (row_work runs on the host).
      std::printf("\nms per step by backend op kind (calls per step); host = the model code around the ops; "
                  "backend calls = calls per step into the device ops, a batch counting once\n%-18s", "phase");
      for (int k = 0; k < kOpKinds; ++k) std::printf(" %22s", op_kind_name(OpKind(k)));
      std::printf(" %10s %14s\n", "host", "backend calls");
      for (const Row& r : rows) {
        double in_ops = 0;
        int64_t device_entries = 0;
        std::printf("%-18s", r.phase.c_str());
        for (int k = 0; k < kOpKinds; ++k) {
          const OpTime& t = r.ops[size_t(k)];
          in_ops += t.seconds;
          if (OpKind(k) != OpKind::kRowWork) device_entries += t.entries;
          std::printf(" %10.3f (%9.1f)", 1e3 * t.seconds / r.steps, double(t.calls) / r.steps);
        }
        std::printf(" %10.3f %14.1f\n", 1e3 * (r.seconds - in_ops) / r.steps, double(device_entries) / r.steps);
      }
      // Selections the backend kept for the attention (DEEPINFER_CUDA_INDEX_SELECT=kept), where any were.
      for (const Row& r : rows) {
        const OpTime& index = r.ops[size_t(OpKind::kIndexScores)];
        const OpTime& attention = r.ops[size_t(OpKind::kSparseAttention)];
        if (index.kept_selections == 0 && attention.kept_selections == 0) continue;
        std::printf("%-18s selections kept on the backend per step: %.1f of %.1f index ops, read by %.1f of %.1f attention tokens\n",
                    r.phase.c_str(), double(index.kept_selections) / r.steps, double(index.calls) / r.steps,
                    double(attention.kept_selections) / r.steps, double(attention.calls) / r.steps);
      }
      // V4.1's Engram updates made where the backend keeps the stream (Backend::engram_gate), where any were.
      for (const Row& r : rows) {
        const int64_t updates = r.ops[size_t(OpKind::kLinear)].stream_updates;
        if (updates > 0) std::printf("%-18s Engram updates on the kept stream per step: %.1f\n", r.phase.c_str(), double(updates) / r.steps);
      }
      // Heads run where the backend keeps the stream (Backend::head_on_kept_stream), where any were.
      for (const Row& r : rows) {
        const int64_t heads = r.ops[size_t(OpKind::kLinear)].heads_on_kept_stream;
        if (heads > 0) std::printf("%-18s heads on the kept stream per step: %.1f\n", r.phase.c_str(), double(heads) / r.steps);
      }
      // Draws whose row's logits came back after all (a nucleus past the device's candidates), where any did.
      for (const Row& r : rows) {
        const int64_t back = r.ops[size_t(OpKind::kLinear)].draws_with_logits_back;
        if (back > 0) std::printf("%-18s draws with their logits back per step: %.1f\n", r.phase.c_str(), double(back) / r.steps);
      }
      // The linear time again, by the weights' storage type, with the rate their bytes stream at: in decode
      // it shows which weights fall short of the read bandwidth.
      std::vector<int> types;  // the weight types any phase used
      for (int k = 0; k < kWeightTypes; ++k) {
        if (std::any_of(rows.begin(), rows.end(), [&](const Row& r) { return r.linear[size_t(k)].calls > 0; })) types.push_back(k);
      }
      std::printf("\nlinear ms per step by weight type (GB/s of the weight bytes those calls read; a batch that mixes types "
                  "has its time split by their bytes)\n%-18s", "phase");
      for (int k : types) std::printf(" %22s", weight_type_name(WeightType(k)));
      std::printf("\n");
      for (const Row& r : rows) {
        std::printf("%-18s", r.phase.c_str());
        for (int k : types) {
          const LinearTime& t = r.linear[size_t(k)];
          std::printf(" %10.3f (%6.2f GB/s)", 1e3 * t.seconds / r.steps, t.seconds > 0 ? t.weight_bytes / t.seconds / 1e9 : 0.0);
        }
        std::printf("\n");
      }
    }
    if (!paired_log.empty()) std::printf("\n");
    for (const std::string& line : paired_log) std::printf("%s\n", line.c_str());
    if (spec) {
      const GenerationResult &p = spec->plain, &sp = spec->speculative;
      const double plain_rate = double(p.tokens.size()) / p.decode_seconds, spec_rate = double(sp.tokens.size()) / sp.decode_seconds;
      std::printf("\nspeculative decoding (DSpark, greedy, %zu tokens after a %d-token prompt): %lld of %lld drafts "
                  "accepted (%.1f%%), acceptance length %.2f tokens per verifying forward, decode %.2f tokens/s vs %.2f "
                  "without = speed-up %.2fx; output identical to plain greedy: %s\n",
                  sp.tokens.size(), args->context, (long long)sp.n_accepted, (long long)sp.n_drafted,
                  sp.n_drafted ? 100.0 * double(sp.n_accepted) / double(sp.n_drafted) : 0.0,
                  sp.n_forwards ? 1.0 + double(sp.n_accepted) / double(sp.n_forwards) : 0.0,
                  spec_rate, plain_rate, spec_rate / plain_rate, sp.tokens == p.tokens ? "yes" : "NO");
    }
    std::printf("\nresident memory at exit: %.3f GB of a %.3f GB checkpoint\n", resident_bytes() / 1e9,
                traffic.checkpoint_bytes / 1e9);
    return 0;
  };
}

}  // namespace deepinfer::cli
