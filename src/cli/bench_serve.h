// `deepinfer bench serve` (bench_serve_command.cpp), a subcommand of `deepinfer bench`, which adds it.
#pragma once

#include "cli/commands.h"

namespace deepinfer::cli {

Runner add_bench_serve_command(CLI::App& bench);

}  // namespace deepinfer::cli
