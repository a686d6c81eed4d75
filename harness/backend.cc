#include "harness/backend.h"

#include "core/error.h"
#include "harness/build_info.h"
#if defined(KVGATE_HAVE_GPU_RUNTIME)
#include "kernels/gpu/gpu_convert.h"
#include "runtime/gpu_model.h"
#endif

namespace kvgate::harness {

void add_backend_option(CLI::App* command, std::string& backend) {
  command->add_option("--backend", backend, "Where the model runs: cpu, or cuda / hip in a GPU build")->capture_default_str();
}

void check_backend(const std::string& backend) {
  if (backend == "cpu") return;
  if (backend != "cuda" && backend != "hip")
    throw_usage_error("--backend: expected cpu, cuda or hip, got '" + echo_user_text(backend) + "'");
#if defined(KVGATE_HAVE_GPU_RUNTIME)
  if (backend == KVGATE_GPU_RUNTIME_VENDOR) {
    if (kernels::gpu::device_count() == 0)
      throw_environment_error("--backend " + backend + ": no " + backend +
                              " device is visible (check the driver, and CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)");
    return;
  }
#endif
  throw_environment_error("--backend " + backend + ": this kvgate was built without a " + backend +
                          " runtime (its backends: " + kBackends + "); configure with -DKVGATE_" +
                          (backend == "cuda" ? "CUDA" : "HIP") + "=ON (scripts/install-deps --gpu installs the toolchains)");
}

std::unique_ptr<runtime::Backend> make_backend(const std::string& backend, const runtime::Model& model, int threads) {
  check_backend(backend);
#if defined(KVGATE_HAVE_GPU_RUNTIME)
  if (backend != "cpu") {
    runtime::require_gpu_forward_support(model, backend);
    return runtime::make_gpu_backend(model);
  }
#endif
  return runtime::make_cpu_backend(model, threads);
}

}  // namespace kvgate::harness
