// Which OpenBLAS kernel set the CPU forward pass runs on, and the one to ask for instead when
// the library did not recognise the CPU. OpenBLAS picks its kernels by CPU model number; a CPU
// newer than the library (Debian bookworm's 0.3.21 on an Emerald Rapids Xeon, family 6 model
// 207) falls back to "Prescott", SSE3 kernels, although the CPU has AVX-512: every sgemm of a
// prefill then runs 2.4x slower (docs/perf.md). The choice is made when the library loads,
// before main, from OPENBLAS_CORETYPE; so kvgate decides here and its entry point re-executes
// itself once with that variable set.
#pragma once

#include <string>
#include <string_view>

namespace kvgate::runtime {

// The vector units the BLAS kernels can use.
struct CpuVectors {
  bool avx2_fma = false;
  bool avx512 = false;       // F, BW, DQ and VL: what OpenBLAS's SkylakeX kernels need
  bool avx512_bf16 = false;  // and BF16: Cooperlake's
};

CpuVectors host_cpu_vectors();

// The kernel set OpenBLAS chose for this process, e.g. "Haswell", "Cooperlake", "Prescott".
std::string blas_kernels_name();

// The OPENBLAS_CORETYPE that gives `cpu` its widest kernels when the library fell back to its
// generic set (`chosen` is "Prescott"); empty when the library's own choice stands (it knew the
// CPU, or the CPU has nothing wider).
std::string blas_kernels_to_request(std::string_view chosen, const CpuVectors& cpu);

}  // namespace kvgate::runtime
