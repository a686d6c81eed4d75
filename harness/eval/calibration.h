#pragma once
// The latency yardstick timed between a run's items (docs/gates.md, "How latency is gated"): a
// fixed workload shaped like the model's forward pass, on the run's thread count. The gate
// compares TTFT and TPOT between runs in CPU time of the work (core/cpu_time.h), which the
// share of the machine a run got does not move; what a busy machine still changes in it (caches
// shared with other jobs, memory bandwidth, a slower or throttled host) it changes in the
// yardstick's CPU time too, timed here just before and after each item. A slower kvgate does not
// slow the yardstick, because it shares none of kvgate's code: no kernel, no SIMD dispatch
// (core/cpu_features.h), no thread pool, no allocation while timed. Its loops are plain C++
// compiled for the baseline ISA in this file alone, so KVGATE_DISABLE_SIMD, a slower matmul or a
// slower allocator moves the items' CPU time and not its own.
//
// It hands off work between its threads as often as the forward pass does and waits the way the
// pool does (core/thread_pool.h: poll for 50 us, then sleep on a futex; a frozen copy here, so
// that a change to the pool is not followed), and like core/cpu_time.h counts its CPU time net
// of that polling:
//   prefill part  `rounds` hand-offs in which every thread multiplies an 8 x n_embd block by its
//                 own n_embd x 256 f32 matrix, held in its core's cache, `gemms` times: a
//                 prefill's few long, compute-bound matmuls; TTFT is divided by its time;
//   decode part   `tokens` steps of 4 x n_layers + 1 hand-offs each (a decode step's matmuls: QKV,
//                 attention out, gate-up, down per layer, and the output), each reading its
//                 share of a buffer as large as the weights (at most 64 MiB) as a
//                 matrix-vector product with rows of n_embd floats, every byte once per step:
//                 a decode's many short, memory-bound hand-offs; TPOT is divided by its time.
// The work is fixed by the shape alone, never by a time budget, so two runs of one model time
// the same work.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "results/store.h"

namespace kvgate::harness {

struct CalibrationShape {
  int64_t n_embd = 0;        // the model's hidden width: the rows' length of both parts
  int64_t n_layers = 0;      // the decode part's hand-offs per step: 4 per layer, plus one
  int64_t weight_bytes = 0;  // what the weights hold: the decode part's buffer (capped)
  int threads = 1;           // the run's CPU threads
};

class Calibration {
 public:
  explicit Calibration(const CalibrationShape& shape);
  ~Calibration();
  Calibration(const Calibration&) = delete;
  Calibration& operator=(const Calibration&) = delete;

  // Times one sample: each part's CPU milliseconds, every thread's, net of polling.
  results::ItemCalibration sample();

  // The workload, as the runs row records it: two runs' calibrated latencies compare only when
  // their workloads are the same text (a changed yardstick measures something else).
  const std::string& workload() const { return workload_; }

 private:
  struct Part;
  enum class Phase { prefill, decode, stop };
  void worker(int index);
  void hand_off(Phase phase, int64_t first_row, int64_t rows);
  void run_phase(int index);
  void prefill(Part& part) const;
  void decode(Part& part, int64_t first_row, int64_t rows) const;
  double work_cpu_ms() const;

  CalibrationShape shape_;
  int rounds_ = 0, gemms_ = 0, tokens_ = 0;
  int64_t hand_offs_ = 0;    // per decode step
  int64_t memory_rows_ = 0;  // rows of n_embd floats in the decode part's buffer
  std::vector<float> memory_;
  std::vector<float> vector_;  // the decode part's input: one row's width
  std::vector<std::unique_ptr<Part>> parts_;
  std::vector<std::thread> workers_;
  std::string workload_;
  // The hand-off: the job (written before generation_ is bumped, read after it is seen) and the
  // workers still running it.
  Phase phase_ = Phase::prefill;
  int64_t first_row_ = 0, rows_ = 0;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  std::atomic<int64_t> polled_ns_{0};  // both threads' polling for a hand-off (await in calibration.cc)
};

}  // namespace kvgate::harness
