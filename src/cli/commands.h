// The deepinfer CLI's subcommands: each file adds one subcommand to the CLI11 app and runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace deepinfer::cli {

// Each add_* registers its subcommand; the returned function runs it (exit code) once parsed.
using Runner = std::function<int()>;

// --backend cpu (the default) or cuda (a -DDEEPINFER_CUDA=ON build): which kernels run the model; sets *cuda.
inline CLI::Option* add_backend_option(CLI::App* cmd, bool* cuda) {
  return cmd->add_option_function<std::string>("--backend", [cuda](const std::string& name) { *cuda = name == "cuda"; },
                                               "kernels: cpu (default) or cuda (a -DDEEPINFER_CUDA=ON build)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}
Runner add_logits_command(CLI::App& app);
Runner add_generate_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_make_model_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_chat_command(CLI::App& app);
Runner add_tokenize_command(CLI::App& app);
Runner add_engram_map_command(CLI::App& app);

}  // namespace deepinfer::cli
