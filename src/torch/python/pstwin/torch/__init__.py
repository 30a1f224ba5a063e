"""BytePS's PyTorch API (byteps.torch) on pstwin: a training script written for BytePS runs with
`import byteps.torch as bps` replaced by `import pstwin.torch as bps`. docs/API.md lists what is
supported and how a job is launched.

Tensors are CPU tensors; push_pull sums them over every worker through the job's servers (one
process per worker: DMLC_NUM_WORKER counts processes, BYTEPS_LOCAL_SIZE must be 1).
"""
import atexit
import collections
import os
import sys
from contextlib import contextmanager

import torch

from pstwin import _core
from pstwin.torch.compression import Compression, Compressor
from pstwin.torch.workload import recorder_from_environment

__all__ = ["init", "shutdown", "rank", "size", "local_rank", "local_size", "declare", "push_pull",
           "push_pull_async", "push_pull_inplace", "push_pull_async_inplace", "poll", "synchronize",
           "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state", "Compression",
           "Compressor"]

_SUPPORTED = (torch.float32, torch.float16, torch.float64, torch.int32, torch.int64)


class _Session:
    """What init() established in this process."""

    def __init__(self):
        self.started = False
        self.ended = False
        self.failed = False  # an uncaught exception: leave without the closing barrier
        self.local_rank = 0
        self.local_size = 1
        self.handles = {}  # handle -> (input, output, average), keeping both alive until synchronize
        self.unnamed = 0
        self.recorder = None  # the first DistributedOptimizer's, with PSTWIN_WORKLOAD_RECORD


_session = _Session()


def _env_int(name, default):
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer; fix: set it to a whole number or unset it") from None


def _check_started():
    if not _session.started:
        raise RuntimeError("pstwin.torch is not initialised: call init() first (on every worker)")


def init(lazy=False):
    """Joins the job described by the DMLC_* environment. On a worker it returns once every node has
    started; on a server or the scheduler (DMLC_ROLE) it serves the job and ends the process with
    status 0 when the job ends, so one script serves every role, as with BytePS's launcher."""
    del lazy  # BytePS's lazy start-up has nothing to defer here
    if _session.started:
        return
    # Every value of ours is checked before the node reads its environment (a bad DMLC_* variable ends
    # the process there with status 2 and a line naming it), so these are exceptions the script sees.
    partition_bytes = _core.partition_bytes()
    local_size = _env_int("BYTEPS_LOCAL_SIZE", 1)
    local_rank = _env_int("BYTEPS_LOCAL_RANK", 0)
    if local_size != 1:
        raise ValueError(f"BYTEPS_LOCAL_SIZE={local_size}: pstwin runs one process per worker; fix: unset it "
                         "(or set 1) and count every worker process in DMLC_NUM_WORKER")
    if local_rank != 0:
        raise ValueError(f"BYTEPS_LOCAL_RANK={local_rank} with BYTEPS_LOCAL_SIZE=1; fix: unset it or set 0")
    role = _core.role()
    if role == "server":
        _core.run_server()
        sys.exit(0)
    if role == "scheduler":
        _core.run_scheduler()
        sys.exit(0)
    _core.start_worker(partition_bytes)
    _session.started = True
    _session.local_rank = local_rank
    _session.local_size = local_size
    previous_hook = sys.excepthook

    def mark_failed(kind, value, traceback):
        _session.failed = True
        previous_hook(kind, value, traceback)

    sys.excepthook = mark_failed
    atexit.register(_shutdown_at_exit)


def _shutdown_at_exit():
    # After an uncaught exception the other workers may wait in a push_pull this one never joins:
    # ending without the closing barrier lets the job end (every node names this one) instead of hanging.
    if not _session.failed:
        shutdown()


def shutdown():
    """Waits for every open push_pull, then leaves the job; the job ends when every worker did."""
    if not _session.started or _session.ended:
        return
    _session.ended = True
    _core.shutdown()
    if _session.recorder is not None:
        _session.recorder.write()


def rank():
    """This worker's rank, 0..size()-1."""
    _check_started()
    return _core.rank()


def size():
    """The number of workers."""
    _check_started()
    return _core.size()


def local_rank():
    _check_started()
    return _session.local_rank


def local_size():
    _check_started()
    return _session.local_size


def declare(name, **kwargs):
    """Gives `name` its keys now, in declaration order: every worker must declare the same names in the
    same order before their first push_pull (DistributedOptimizer and broadcast_parameters do)."""
    del kwargs  # BytePS's per-tensor compressor settings: not supported, the tensor goes as it is
    _check_started()
    _core.declare(name)


def _buffer_of(tensor, name):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"push_pull '{name}': expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"push_pull '{name}': the tensor is on {tensor.device}; pstwin.torch sums CPU tensors; "
                         "fix: pass tensor.cpu()")
    if tensor.dtype not in _SUPPORTED:
        raise ValueError(f"push_pull '{name}': dtype {tensor.dtype} is not supported; fix: use one of "
                         + ", ".join(str(t) for t in _SUPPORTED))
    if tensor.is_sparse or not tensor.is_contiguous():
        raise ValueError(f"push_pull '{name}': the tensor is not dense and contiguous; fix: pass .contiguous()")
    # numpy() is a view: the sum lands in the tensor's own memory.
    return tensor.detach().numpy()


def _start(tensor, output, average, name):
    _check_started()
    if name is None:
        name = f"push_pull.noname.{_session.unnamed}"
        _session.unnamed += 1
    handle = _core.push_pull_async(_buffer_of(output, name), name)
    _session.handles[handle] = (tensor, output, average)
    return handle


def push_pull_async(tensor, average=True, name=None, version=0, priority=0):
    """Starts summing (average=True: averaging) `tensor` over every worker into a new tensor; `tensor`
    is left unchanged. Returns a handle for poll() and synchronize()."""
    del version, priority
    return _start(tensor, tensor.detach().clone(memory_format=torch.contiguous_format), average, name)


def push_pull_async_inplace(tensor, average=True, name=None, version=0, priority=0, staleness=0):
    """As push_pull_async, into `tensor` itself."""
    del version, priority
    if staleness != 0:
        raise ValueError(f"push_pull '{name}': staleness={staleness}; pstwin.torch is synchronous; fix: pass 0")
    return _start(tensor, tensor, average, name)


def poll(handle):
    """True once the push_pull of `handle` has finished; synchronize() then returns at once."""
    _check_started()
    return _core.poll(handle)


def synchronize(handle):
    """Waits for the push_pull of `handle` and returns its output tensor."""
    _check_started()
    if handle not in _session.handles:
        raise ValueError(f"handle {handle!r} is not an open push_pull (already synchronized, or never returned)")
    _core.wait(handle)
    _, output, average = _session.handles.pop(handle)
    if average:
        with torch.no_grad():
            if output.dtype.is_floating_point:
                output.div_(size())
            else:
                output.floor_divide_(size())
    return output


def push_pull_inplace(tensor, average=True, name=None, version=0, priority=0, staleness=0):
    """Sums (averages) `tensor` over every worker in place and returns it."""
    return synchronize(push_pull_async_inplace(tensor, average, name, version, priority, staleness))


class _PushPull(torch.autograd.Function):
    """push_pull as a differentiable operation: the gradient is push_pulled too."""

    @staticmethod
    def forward(ctx, tensor, average, name):
        ctx.average = average
        ctx.name = name
        return synchronize(push_pull_async(tensor, average, name))

    @staticmethod
    def backward(ctx, grad_output):
        return synchronize(push_pull_async(grad_output.contiguous(), ctx.average, ctx.name + ".grad")), None, None


def push_pull(tensor, average=True, name=None, version=0, priority=0, compression=Compression.none):
    """Returns `tensor` summed (average=True: averaged) over every worker; `tensor` is unchanged. As in
    BytePS, a name is required: every worker pushes the same name."""
    del version, priority
    if name is None:
        raise AssertionError("To manually call push_pull, you must specify a name by name=...")
    compressed, ctx = compression.compress(tensor)
    return compression.decompress(_PushPull.apply(compressed, average, name), ctx)


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods DistributedOptimizer() adds to the wrapped optimizer's class."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        named_parameters = list(named_parameters) if named_parameters is not None else []
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters().")
        names = [name for name, _ in named_parameters]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                             + ", ".join(duplicates))
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters:
            self._parameter_names = {p: name for name, p in named_parameters}
            unnamed = [p for p in all_params if p not in self._parameter_names]
            if unnamed:
                raise ValueError(f"named_parameters lacks {len(unnamed)} of the optimizer's parameters; fix: "
                                 "pass model.named_parameters() of the model the optimizer trains")
        else:
            self._parameter_names = {p: f"push_pull.noname.{i}" for i, p in enumerate(all_params)}
        self.backward_passes_per_step = backward_passes_per_step
        self._push_pull_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._should_sync = True
        self._recorder = None
        if _session.recorder is None:
            tensors = [("Gradient." + self._parameter_names[p], p.numel() * p.element_size(), str(p.dtype))
                       for p in all_params if p.requires_grad]
            self._recorder = _session.recorder = recorder_from_environment(
                tensors, rank(), size(), _core.num_servers(), _core.partition_bytes())
        if size() > 1 or os.environ.get("BYTEPS_FORCE_DISTRIBUTED", "0") != "0":
            self._register_hooks()
        for name in sorted(self._parameter_names.values()):
            declare("Gradient." + name)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._push_pull_delay:
            self._push_pull_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    # The gradient accumulator's hook runs once the gradient of p is complete, while
                    # backward() still works on earlier layers: their push_pulls overlap it.
                    accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                    accumulator.register_hook(self._make_hook(p))
                    self._grad_accs.append(accumulator)

    def _push_pull_grad_async(self, p):
        compressed, ctx = self._compression.compress(p.grad)
        handle = push_pull_async_inplace(compressed, average=True, name="Gradient." + self._parameter_names[p])
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None:
                if self._push_pull_delay[p] <= 0:
                    raise AssertionError("Gradients were computed more than backward_passes_per_step times "
                                         "before call to step(). Increase backward_passes_per_step to "
                                         "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._push_pull_delay[p] > 0
            handle, ctx = None, None
            if self._recorder is not None:
                self._recorder.gradient_ready("Gradient." + self._parameter_names[p])
            self._push_pull_delay[p] -= 1
            if self._push_pull_delay[p] == 0:
                handle, ctx = self._push_pull_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    def synchronize(self):
        """Waits for every gradient's push_pull and puts the averages in p.grad."""
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._push_pull_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._push_pull_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            output = synchronize(handle)
            self._push_pull_delay[p] = self.backward_passes_per_step
            p.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()

    @contextmanager
    def skip_synchronize(self):
        """step() inside it does not synchronize (call synchronize() yourself before it)."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def step(self, closure=None):
        if self._recorder is not None:
            self._recorder.synchronize_started()
        if self._should_sync:
            self.synchronize()
        if self._recorder is not None:
            self._recorder.synchronize_ended()
        loss = super(self.__class__, self).step(closure)
        if self._recorder is not None:
            self._recorder.step_ended()
        return loss


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1):
    """Wraps `optimizer` so that step() applies the gradients averaged over every worker. Each gradient's
    push_pull starts as soon as backward() has computed it; step() (or synchronize()) waits for them."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)


def broadcast_parameters(params, root_rank, prefix="Parameter."):
    """Sets every worker's tensors to root_rank's: `params` is model.state_dict(),
    model.named_parameters() (as a list) or a list of tensors. As BytePS: a push_pull of sums where
    every other rank pushes zeros."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params)}")
    handles = []
    with torch.no_grad():
        for name, p in params:
            if rank() != root_rank:
                p.fill_(0)
            if name is not None:
                declare(prefix + name)
            handles.append(push_pull_async_inplace(p, average=False,
                                                   name=None if name is None else prefix + name))
    for handle in handles:
        synchronize(handle)


def _as_tensor(value):
    """A scalar or a tuple of scalars of an optimizer's settings or state as float64 (exact for the
    float32 and int values optimizers keep), or None for what cannot travel (None, strings)."""
    items = value if isinstance(value, (tuple, list)) else [value]
    if not items or not all(isinstance(v, (bool, int, float)) for v in items):
        return None
    return torch.tensor([float(v) for v in items], dtype=torch.float64)


def _from_tensor(tensor, like):
    if isinstance(like, (tuple, list)):
        return type(like)(type(v)(x) for v, x in zip(like, tensor.tolist()))
    return type(like)(tensor.tolist()[0])


def broadcast_optimizer_state(optimizer, root_rank, prefix="Parameter."):
    """Sets every worker's optimizer state and settings (learning rate, momentum buffers, ...) to
    root_rank's. A new optimizer's state is made first by one step on zero gradients, as BytePS does."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad = p.data.new(p.size()).zero_()
        # A DistributedOptimizer's own step() would push_pull: only the wrapped class's step.
        if type(optimizer).step is _DistributedOptimizer.step:
            super(optimizer.__class__, optimizer).step()
        else:
            optimizer.step()
        state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        return
    params = []
    after = []
    occurrences = collections.defaultdict(int)
    for index, group in enumerate(state_dict["param_groups"]):
        for option, value in sorted(group.items()):
            if option == "params":
                continue
            tensor = _as_tensor(value)
            if tensor is None:
                continue
            params.append((f"{option}.{index}", tensor))
            after.append(lambda i=index, o=option, t=tensor, v=value:
                         optimizer.param_groups[i].__setitem__(o, _from_tensor(t, v)))
        for pid in group["params"]:
            state = state_dict["state"].get(pid, {})
            for name, value in sorted(state.items()):
                occurrences[name] += 1
                key = f"{name}.{occurrences[name]}"
                if torch.is_tensor(value):
                    params.append((key, value))
                    continue
                tensor = _as_tensor(value)
                if tensor is None:
                    continue
                params.append((key, tensor))
                # state_dict's per-parameter dicts are the optimizer's own.
                after.append(lambda s=state, n=name, t=tensor, v=value: s.__setitem__(n, _from_tensor(t, v)))
    broadcast_parameters(params, root_rank, prefix)
    for apply in after:
        apply()
