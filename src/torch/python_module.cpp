// pstwin._core: the C++ half of pstwin.torch (python/pstwin/torch/__init__.py), over libpstwin's
// ps-lite API. Python hands tensors over as buffers (numpy views of CPU tensors), so this module
// needs pybind11 only, not libtorch's headers, and reads and writes the tensor's own memory.
#include <pybind11/pybind11.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "torch/push_pull_worker.hpp"
#include "torch/sum_server.hpp"

namespace py = pybind11;

namespace pstwin::torch {

namespace {

// The worker of this process, between start_worker() and shutdown().
std::unique_ptr<PushPullWorker>& worker_slot() {
  static std::unique_ptr<PushPullWorker> worker;
  return worker;
}

PushPullWorker& worker() {
  auto& slot = worker_slot();
  if (!slot) throw std::runtime_error("pstwin.torch is not initialised on this worker: call init() first");
  return *slot;
}

void start_worker(std::size_t partition_bytes) {
  if (worker_slot()) return;
  {
    const py::gil_scoped_release unlocked;
    ps::Start(0);
  }
  worker_slot() = std::make_unique<PushPullWorker>(partition_bytes);
}

int push_pull_async(const py::buffer& tensor, const std::string& name) {
  const py::buffer_info info = tensor.request(true);
  const auto type = element_type_of_format(info.format, static_cast<std::size_t>(info.itemsize));
  if (!type) {
    throw std::invalid_argument("push_pull '" + name + "': elements of buffer format '" + info.format +
                                "' are not supported; fix: use float32, float16, float64, int32 or int64");
  }
  py::ssize_t expected_stride = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    const auto dim = static_cast<std::size_t>(d);
    if (info.shape[dim] != 1 && info.strides[dim] != expected_stride) {
      throw std::invalid_argument("push_pull '" + name +
                                  "': the tensor is not contiguous; fix: pass .contiguous()");
    }
    expected_stride *= info.shape[dim];
  }
  const auto bytes = static_cast<std::size_t>(info.size * info.itemsize);
  return worker().start(name, *type, std::span(static_cast<std::byte*>(info.ptr), bytes));
}

void wait_for_handle(int handle) {
  PushPullWorker& w = worker();
  const py::gil_scoped_release unlocked;
  w.wait(handle);
}

void shutdown() {
  auto& slot = worker_slot();
  if (!slot) return;
  const py::gil_scoped_release unlocked;
  slot.reset();  // waits for every open handle
  ps::Finalize(0, true);
}

}  // namespace

}  // namespace pstwin::torch

PYBIND11_MODULE(_core, m) {
  using namespace pstwin::torch;
  m.doc() = "pstwin's push_pull over the ps-lite API (libpstwin); used by pstwin.torch";
  m.def("role", [] {
    if (ps::IsScheduler()) return "scheduler";
    return ps::IsServer() ? "server" : "worker";
  });
  m.def(
      "run_server",
      [] {
        const py::gil_scoped_release unlocked;
        SumServer::run();
      },
      "Serves push_pull until the job ends");
  m.def(
      "run_scheduler",
      [] {
        const py::gil_scoped_release unlocked;
        ps::Start(0);
        ps::Finalize(0, true);
      },
      "Schedules the job until it ends");
  // Checked before anything reads the node's environment (which ends the process on a bad value), so a
  // refused value is an exception the script can report.
  m.def("partition_bytes", [] { return parse_partition_bytes(std::getenv("BYTEPS_PARTITION_BYTES")); });
  m.def("start_worker", &start_worker, py::arg("partition_bytes"),
        "Starts this worker node; returns once every node started");
  m.def("rank", [] { return ps::MyRank(); });
  m.def("size", [] { return ps::NumWorkers(); });
  m.def("num_servers", [] { return ps::NumServers(); });
  m.def("declare", [](const std::string& name) { return worker().declare(name); });
  m.def("push_pull_async", &push_pull_async, py::arg("tensor"), py::arg("name"),
        "Starts summing the buffer over every worker, in place; returns a handle");
  m.def("poll", [](int handle) { return worker().done(handle); });
  m.def("wait", &wait_for_handle);
  m.def("shutdown", &shutdown);
}
