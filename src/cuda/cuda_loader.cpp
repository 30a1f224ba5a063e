// cuda_tensors.hpp in a CUDA build, on the process's side: every call goes to libpstwin_cuda.so
// (cuda_module.hpp), opened on the first one. Linking the GPU code into the binary instead made every
// pstwin process map libcudart, cuBLAS and NCCL at start, CPU-only nodes included.
#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cuda/cuda_module.hpp"
#include "cuda/cuda_tensors.hpp"

namespace pstwin::cuda {
namespace {

// dlopen's handle. RTLD_NODELETE keeps the module mapped past dlclose: objects it made may be destroyed
// by static destructors that run after this handle's, and libcudart's own exit handlers still run.
class SharedObject {
 public:
  SharedObject() = default;
  explicit SharedObject(void* handle) : handle_(handle) {}
  SharedObject(SharedObject&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  SharedObject& operator=(SharedObject&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  void* get() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// What to do about a module that is missing or does not load.
constexpr const char* kFix =
    "reinstall pstwin (cmake --install puts the module in <prefix>/" PSTWIN_CUDA_MODULE_INSTALL_DIR
    "), or use workload.device = \"cpu\", which needs no module";

struct Loaded {
  SharedObject library;
  const Module* module = nullptr;
  std::string why;  // when `module` is null: one line naming the module, the failure and the fix
};

// Where the module may be: installed next to this binary (<prefix>/bin/pstwin ->
// <prefix>/lib/pstwin/libpstwin_cuda.so), else where this build put it. An installed module comes first
// even when the build tree is still there, as the scenarios do (cli/data_files.cpp).
std::vector<std::filesystem::path> module_paths() {
  std::vector<std::filesystem::path> paths;
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) paths.push_back((self.parent_path() / PSTWIN_CUDA_MODULE_FROM_BIN).lexically_normal());
  paths.emplace_back(PSTWIN_CUDA_MODULE_BUILT);
  return paths;
}

Loaded open_module() {
  Loaded loaded;
  const auto paths = module_paths();
  std::error_code error;
  for (const auto& path : paths) {
    if (!std::filesystem::exists(path, error)) continue;
    // RTLD_LOCAL: the module's symbols stay its own; it exports only its entry point anyway.
    loaded.library = SharedObject(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE));
    if (loaded.library.get() == nullptr) {
      loaded.why = "cannot load the CUDA module " + path.string() + ": " + dlerror() +
                   " (where that names a CUDA or NCCL library: install the CUDA runtime and NCCL this pstwin "
                   "was built with, or put their directory on LD_LIBRARY_PATH; otherwise " +
                   kFix + ")";
      return loaded;
    }
    const auto entry = reinterpret_cast<ModuleEntry>(dlsym(loaded.library.get(), kModuleEntry));
    loaded.module = entry != nullptr ? entry(kModuleInterface) : nullptr;
    if (loaded.module == nullptr)
      loaded.why = "the CUDA module " + path.string() + " is not this pstwin's (" +
                   (entry == nullptr ? std::string("no ") + kModuleEntry : "another module interface") +
                   "): " + kFix;
    return loaded;
  }
  loaded.why = "this pstwin was built with CUDA but its module is missing (looked for";
  for (const auto& path : paths) loaded.why += " " + path.string();
  loaded.why += std::string("): ") + kFix;
  return loaded;
}

// Opened once per process, by whichever thread asks first.
const Loaded& loaded() {
  static const Loaded instance = open_module();
  return instance;
}

const Module& module_or_throw() {
  const Loaded& state = loaded();
  if (state.module == nullptr) throw DeviceError("workload.device = \"cuda\": " + state.why);
  return *state.module;
}

}  // namespace

Availability availability() {
  const Loaded& state = loaded();
  if (state.module == nullptr) return {0, state.why};
  return state.module->availability();
}

std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload, int rank) {
  return module_or_throw().make_device_tensors(workload, rank);
}

// The factories load nothing themselves: every real job takes them (realnet/node_run.cpp), and only a
// worker on the device path calls them.
DeviceFactory device_factory() {
  return make_device_tensors;
}

std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t> layers, std::size_t max_batch,
                                             int rank) {
  return module_or_throw().make_mlp_step(layers, max_batch, rank);
}

MlpStepFactory mlp_step_factory() {
  return make_mlp_step;
}

}  // namespace pstwin::cuda
