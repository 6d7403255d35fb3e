// Hand-made report pieces shared by the hints and autograd tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "report/fault_report.h"

namespace cdsa::report::fixtures {

// A kernel launch record with only what the hints and autograd read: its number, kind and kernel.
inline Launch kernel_launch(uint64_t seq, const std::string& kernel) {
  Launch l;
  l.seq = seq;
  l.kind = "kernel";
  l.kernel = kernel;
  return l;
}

// A report that names one failing launch exactly.
inline FaultReport exact_report(int code, const std::string& kernel, uint64_t seq) {
  FaultReport r;
  r.code = code;
  r.attribution = Attribution::Exact;
  Candidate c;
  c.launch = kernel_launch(seq, kernel);
  r.candidates.push_back(c);
  return r;
}

// `fn` maps each input to its expected output.
template <class Fn>
void expect_each(Fn fn, std::initializer_list<std::pair<const char*, const char*>> cases) {
  for (const auto& [in, want] : cases) EXPECT_EQ(fn(in), want) << "input: " << in;
}

}  // namespace cdsa::report::fixtures
