// `deepinfer bench`: prefill and decode throughput of a checkpoint on this machine, printed beside the
// machine's measured ceilings (read bandwidth, peak fp32 FMA rate) and the bytes/FLOPs each token needs.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "core/machine_ceiling.h"
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
}  // namespace

Runner add_bench_command(CLI::App& app) {
  struct Args {
    std::string model;
    std::vector<int64_t> prefill_lens{512};
    std::vector<int> batches{1, 4, 16};
    int decode_steps = 16, threads = 0;
    bool exact = false, skip_ceiling = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("bench", "prefill / decode tokens per second against the machine's ceilings");
  cmd->add_option("--model", args->model, "checkpoint directory")->required();
  cmd->add_option("--prefill", args->prefill_lens, "prompt lengths to time")->delimiter(',');
  cmd->add_option("--batch", args->batches, "decode batch sizes")->delimiter(',');
  cmd->add_option("--decode-steps", args->decode_steps, "decode steps per batch size")->check(CLI::Range(1, 100000));
  cmd->add_option("--threads", args->threads, "threads (0 = all)");
  cmd->add_flag("--exact", args->exact, "time the reference kernels instead");
  cmd->add_flag("--skip-ceiling", args->skip_ceiling, "do not measure bandwidth / peak FMA");
  return [args]() {
    auto model = Model::open(args->model, ModelOptions{.exact = args->exact, .n_threads = args->threads, .show_progress = true});
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
      return 1;
    }
    Model& m = *model.value();
    const ModelConfig& c = m.config();
    const WeightTraffic traffic = weight_traffic(c);
    MachineCeiling ceiling;
    if (!args->skip_ceiling) ceiling = measure_machine_ceiling(args->threads);
    std::printf("model %s: %d layers, dim %d, %d experts (%d active), checkpoint %.3f GB, resident %.3f GB\n",
                args->model.c_str(), c.n_layers, c.dim, c.n_routed_experts, c.n_activated_experts,
                traffic.checkpoint_bytes / 1e9, resident_bytes() / 1e9);
    std::printf("backend %s, %d threads, simd %s; measured read bandwidth %.1f GB/s, peak fp32 FMA %.1f GFLOP/s\n",
                m.backend().name(), ceiling.n_threads, ceiling.simd.c_str(), ceiling.read_gb_per_s, ceiling.peak_gflops);
    std::printf("weights read per decoded token (batch 1): %.2f MB; weight MACs per token: %.1f M\n\n",
                traffic.decode_bytes_per_token / 1e6, traffic.decode_macs_per_token / 1e6);
    std::printf("%-22s %12s %14s %10s %14s %10s\n", "phase", "tokens/s", "weight GB/s", "% of BW", "GFLOP/s", "% of peak");
    Sampler rng(1234);
    auto row = [&](const std::string& phase, double tokens, double seconds, double bytes) {
      const double tps = tokens / seconds, gbs = bytes / seconds / 1e9;
      const double gflops = 2.0 * double(traffic.decode_macs_per_token) * tokens / seconds / 1e9;
      std::printf("%-22s %12.1f %14.2f %9.1f%% %14.2f %9.1f%%\n", phase.c_str(), tps, gbs,
                  ceiling.read_gb_per_s > 0 ? 100 * gbs / ceiling.read_gb_per_s : 0.0, gflops,
                  ceiling.peak_gflops > 0 ? 100 * gflops / ceiling.peak_gflops : 0.0);
    };
    for (int64_t len : args->prefill_lens) {
      SequenceState seq = m.new_sequence();
      const auto ids = random_ids(rng, len, c.vocab_size);
      ForwardChunk fc{&seq, ids, len};
      const auto t0 = Clock::now();
      m.forward(std::span<const ForwardChunk>(&fc, 1));
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      // A prefill reads each weight once for the whole prompt (every expert may be touched).
      row("prefill " + std::to_string(len), double(len), s, double(traffic.checkpoint_bytes));
    }
    for (int batch : args->batches) {
      std::vector<SequenceState> seqs;
      std::vector<std::vector<int32_t>> next(static_cast<size_t>(batch));
      for (int b = 0; b < batch; ++b) {
        seqs.push_back(m.new_sequence());
        const auto ids = random_ids(rng, 16, c.vocab_size);
        ForwardChunk fc{&seqs.back(), ids, 16};
        m.forward(std::span<const ForwardChunk>(&fc, 1));
        next[size_t(b)] = random_ids(rng, args->decode_steps, c.vocab_size);
      }
      const auto t0 = Clock::now();
      for (int step = 0; step < args->decode_steps; ++step) {
        std::vector<ForwardChunk> chunks;
        for (int b = 0; b < batch; ++b) {
          chunks.push_back(ForwardChunk{&seqs[size_t(b)], std::span<const int32_t>(&next[size_t(b)][size_t(step)], 1), 0});
        }
        m.forward(chunks);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      // Bytes: batch 1 reads the active set once per step; larger batches at most the whole checkpoint.
      const double bytes_per_step = std::min<double>(double(traffic.checkpoint_bytes), double(traffic.decode_bytes_per_token) * batch);
      row("decode batch " + std::to_string(batch), double(batch) * args->decode_steps, s, bytes_per_step * args->decode_steps);
    }
    std::printf("\nresident memory at exit: %.3f GB\n", resident_bytes() / 1e9);
    return 0;
  };
}

}  // namespace deepinfer::cli
