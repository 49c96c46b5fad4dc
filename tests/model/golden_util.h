// Helpers for the golden-model tests: the golden README's fast-path statistics, the tolerance.args file that
// ships beside each golden model (so the bounds come from the data, not from this code), and a golden case's
// steps as chunks of a batched forward.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/teacher_forcing.h"

namespace deepinfer::testing {

inline std::string golden_dir() { return DEEPINFER_GOLDEN_DIR; }

struct LogitStats {
  double max_abs = 0, mean_abs = 0, top1 = 0, median_cos = 0, min_cos = 1, row0_cos = 0, bad_frac = 0;
  bool finite = true;
};

inline LogitStats logit_stats(const std::vector<float>& ref, const std::vector<float>& got, int64_t vocab,
                              double bad_cos = 0.99) {
  LogitStats s;
  const int64_t rows = int64_t(ref.size()) / vocab;
  std::vector<double> cos(static_cast<size_t>(rows));
  double abs_total = 0;
  int64_t agree = 0, bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double xy = 0, xx = 0, yy = 0;
    int64_t ref_best = 0, got_best = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double x = ref[size_t(r * vocab + v)], y = got[size_t(r * vocab + v)];
      if (!std::isfinite(y)) s.finite = false;
      xy += x * y; xx += x * x; yy += y * y;
      s.max_abs = std::max(s.max_abs, std::fabs(x - y));
      abs_total += std::fabs(x - y);
      if (x > ref[size_t(r * vocab + ref_best)]) ref_best = v;
      if (y > got[size_t(r * vocab + got_best)]) got_best = v;
    }
    cos[size_t(r)] = xy / std::sqrt(xx * yy);
    agree += ref_best == got_best;
    bad += cos[size_t(r)] < bad_cos;
    s.min_cos = std::min(s.min_cos, cos[size_t(r)]);
  }
  s.row0_cos = rows ? cos[0] : 0;
  s.mean_abs = abs_total / double(ref.size());
  s.top1 = double(agree) / double(rows);
  s.bad_frac = double(bad) / double(rows);
  std::sort(cos.begin(), cos.end());
  s.median_cos = rows % 2 ? cos[size_t(rows / 2)] : 0.5 * (cos[size_t(rows / 2 - 1)] + cos[size_t(rows / 2)]);
  return s;
}

// Largest |a - b| over two equally long vectors (a size mismatch fails the calling test).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// tolerance.args: "--top1 0.6 --mean-abs 0.35 ..." -> {"top1": 0.6, "mean-abs": 0.35, ...}
inline std::map<std::string, double> read_tolerances(const std::string& model_dir) {
  std::ifstream in(model_dir + "/tolerance.args");
  std::map<std::string, double> out;
  std::string key, value;
  while (in >> key >> value) out[key.substr(2)] = std::stod(value);
  return out;
}

// Step `step` of golden case gc as one sequence's chunk of a (batched) forward: step 0 the whole prompt, step
// k > 0 the teacher-forced continuation token k - 1.
inline ForwardChunk golden_step_chunk(SequenceState& state, const GoldenCase& gc, size_t step) {
  ForwardChunk fc;
  fc.state = &state;
  if (step == 0) {
    fc.ids = gc.prompt;
    fc.prompt_len = int64_t(gc.prompt.size());
  } else {
    fc.ids = std::span<const int32_t>(&gc.continuation[step - 1], 1);
  }
  return fc;
}

}  // namespace deepinfer::testing
