// Percentiles of a sample (benchmark figures): linear interpolation between closest ranks, numpy's default
// ("linear" method): p = 0 is the minimum, p = 100 the maximum. Pure functions; no I/O.
#pragma once

#include <vector>

namespace deepinfer {

// The p-th percentile (p in [0, 100]) of `values`, in any order. NaN for an empty sample.
double percentile(std::vector<double> values, double p);

}  // namespace deepinfer
