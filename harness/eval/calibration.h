#pragma once
// The latency yardstick timed between a run's items (docs/gates.md, "How latency is gated"): a
// fixed compute-bound and a fixed memory-bound workload at the model's shapes, on the run's
// thread count, so the gate can compare TTFT and TPOT between two runs made under different
// machine load. Load that slows the items slows the yardstick timed seconds before and after
// them alike; a slower kvgate does not slow the yardstick, because it shares none of kvgate's
// code: no kernel, no SIMD dispatch (core/cpu_features.h), no thread pool, no allocation while
// timed. Its loops are plain C++ compiled for the baseline ISA in this file alone, so
// KVGATE_DISABLE_SIMD, a slower matmul or a slower ThreadPool hand-off moves the items' times
// and not the yardstick's.
//
// One sample: `rounds` rounds, each a compute phase (every thread multiplies an 8 x n_embd
// block by its own n_embd x 256 f32 matrix, held in its core's cache, `gemms` times) then a
// memory phase (every thread reads its share of 1/rounds of a buffer as large as the weights,
// at most 64 MiB, as a matrix-vector product with rows of n_embd floats), each phase ended by a
// barrier across the threads, as the forward pass's matmuls are. The work is fixed by the
// shape alone, never by a time budget, so two runs of one model time the same work.
#include <barrier>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "results/store.h"

namespace kvgate::harness {

struct CalibrationShape {
  int64_t n_embd = 0;        // the model's hidden width: the rows' length of both workloads
  int64_t weight_bytes = 0;  // what the weights hold: the memory workload's size (capped)
  int threads = 1;           // the run's CPU threads
};

class Calibration {
 public:
  explicit Calibration(const CalibrationShape& shape);
  ~Calibration();
  Calibration(const Calibration&) = delete;
  Calibration& operator=(const Calibration&) = delete;

  // Times one sample: the compute and the memory phases' wall milliseconds, each summed over the
  // rounds (from the phase's start on this thread to the barrier that ends it on every thread).
  results::ItemCalibration sample();

  // The workload, as the runs row records it: two runs' calibrated latencies compare only when
  // their workloads are the same text (a changed yardstick measures something else).
  const std::string& workload() const { return workload_; }

 private:
  struct Part;
  void worker(int index);
  void compute(Part& part) const;
  void memory(Part& part, int index, int round) const;

  CalibrationShape shape_;
  int rounds_ = 0, gemms_ = 0;
  int64_t memory_rows_ = 0;  // rows of n_embd floats in the memory workload
  std::vector<float> memory_;
  std::vector<float> vector_;  // the memory workload's input: one row's width
  std::vector<std::unique_ptr<Part>> parts_;
  std::barrier<> barrier_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
  std::string workload_;
  double sink_ = 0;  // every result lands here, so no phase can be optimised away
};

}  // namespace kvgate::harness
