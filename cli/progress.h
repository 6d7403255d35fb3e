// A one-line progress indicator on stderr for long CLI operations
// (symbolizing many modules, reading many trace files).
//
// Contract: prints only when stderr is a terminal (never into logs or pipes,
// so tests and scripts see clean output); redraws at most every 100 ms and
// erases its line when done or destroyed. Single-threaded; allocates nothing
// per step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cdsa::cli {

class Progress {
 public:
  Progress(const char* what, size_t total);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void step(size_t done);  // `done` of `total` finished
  void finish();           // erase the line (idempotent)

 private:
  const char* what_;
  size_t total_;
  bool active_;
  bool drawn_ = false;
  uint64_t last_ns_ = 0;
};

}  // namespace cdsa::cli
