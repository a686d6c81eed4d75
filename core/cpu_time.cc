#include "core/cpu_time.h"

#include <time.h>

#include "core/thread_pool.h"

namespace kvgate {

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double work_cpu_seconds() { return process_cpu_seconds() - ThreadPool::polled_seconds(); }

}  // namespace kvgate
