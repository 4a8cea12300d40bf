r"""Array backends: one place that knows which library and device a call computes on.

rfkit's estimate paths (exact kernels, every feature map, every attention estimator) accept arrays
of NumPy, PyTorch (any device), CuPy, and the strict reference namespace ``array_api_strict``,
compute in that library on that device and return arrays of the same namespace, device and dtype.
They are written against the Python array API standard through ``array-api-compat`` (as SciPy and
scikit-learn are); no backend is a hard dependency.

Rules (docs page *Backends and scaling*):

* :func:`get_backend` resolves the namespace and device of a call's arrays **once**, at the public
  boundary, and refuses arrays of an unsupported library, mixed libraries or mixed devices in one
  call (never a silent copy between devices). Lists, tuples and scalars join the call's backend.
* Estimate code receives a :class:`Backend` and calls ``bk.xp`` (the standard namespace) or one of
  the few **named shims** below where the standard has no function (in-place ``exp``, a cumulative
  maximum, a matrix product into a preallocated block, a log-sum-exp). Nothing outside this module
  branches on the library.
* Randomness stays NumPy: draws come from NumPy Generators, moved to the input's device with
  :meth:`Backend.asarray` (one ``rng``, the same directions on every backend); ``rfkit.theory``,
  bounds, tables and plots stay NumPy.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import operator
import threading
from types import ModuleType
from typing import Any

import numpy as np

from ._backend_devices import available_devices
from ._parallel import resolve_threads, run_blocks
from .exceptions import BackendError, BackendNotInstalledError

__all__ = [
    "BACKENDS",
    "Backend",
    "get_backend",
    "backend_for",
    "NUMPY",  # noqa: F822 - made on first use by the module __getattr__
    "is_array",
    "to_numpy",
    "available_devices",
]

#: Libraries whose arrays rfkit computes on (``array_api_strict`` is the strict reference
#: namespace used to test that the code keeps to the standard).
BACKENDS: tuple[str, ...] = ("numpy", "torch", "cupy", "array_api_strict")

#: Work arrays of chunked loops: this many elements on the CPU, more on accelerators.
_BLOCK_ELEMS = {"numpy": 1 << 19, "array_api_strict": 1 << 19, "torch": 1 << 19, "cupy": 1 << 24}
#: Row blocks of the elementwise-heavy steps: L2-sized on the CPU (NumPy runs them on rfkit's
#: thread pool), one large block on accelerators (their kernels are parallel already).
_ROW_BLOCK_ELEMS = {"cpu": 1 << 16, "accelerator": 1 << 26}


def _compat() -> ModuleType:
    try:
        import array_api_compat
    except ImportError:  # pragma: no cover - a declared dependency
        raise BackendNotInstalledError(
            "rfkit's array backends need the package `array-api-compat`: pip install array-api-compat"
        ) from None
    return array_api_compat


@dataclasses.dataclass(frozen=True, eq=False)
class Backend:
    """The array library and device of one call, with the shims the standard lacks.

    Attributes
    ----------
    name : str
        One of :data:`BACKENDS`.
    xp : module
        The array-API namespace (``array_api_compat``'s wrapper for NumPy, PyTorch and
        CuPy; ``array_api_strict`` itself).
    device : object
        The device of the call's arrays (``"cpu"`` for NumPy).
    inplace_ok : bool
        False when autograd records the call (a PyTorch input requires grad, grad mode on): the shims
        and estimate code then never write into arrays that may be saved for the backward pass.
    """

    name: str
    xp: Any
    device: Any
    inplace_ok: bool = True

    # ------------------------------------------------------------------ basics
    @property
    def is_numpy(self) -> bool:
        """True for NumPy (the reference path, and the only one that uses rfkit's thread pool)."""
        return self.name == "numpy"

    @property
    def block_elems(self) -> int:
        """Element budget of one work block of a chunked loop on this backend."""
        if self.name == "torch" and str(self.device).startswith("cpu"):
            return _BLOCK_ELEMS["numpy"]
        if self.name == "torch":
            return _BLOCK_ELEMS["cupy"]
        return _BLOCK_ELEMS[self.name]

    @property
    def row_block_elems(self) -> int:
        """Element budget of one row block of :meth:`run_blocks` (fixed per backend)."""
        on_cpu = self.name in ("numpy", "array_api_strict") or str(self.device).startswith("cpu")
        return _ROW_BLOCK_ELEMS["cpu" if on_cpu else "accelerator"]

    @property
    def uses_thread_pool(self) -> bool:
        """True where rfkit's own thread pool runs the blocks (NumPy); other libraries parallelise inside."""
        return self.name == "numpy"

    def work_budget(self, cpu_elems: int) -> int:
        """Elements of one work block: ``cpu_elems`` (cache-sized) on NumPy, at least :attr:`block_elems`
        elsewhere (accelerators: fewer, larger kernels)."""
        return cpu_elems if self.uses_thread_pool else max(cpu_elems, self.block_elems)

    def row_blocks(self, n_rows: int, per_row: int, budget: int | None = None) -> list[slice]:
        """Fixed row blocks of at most ``budget`` (default :attr:`row_block_elems`) elements.

        The layout depends only on the sizes (and the backend), never on the thread count.
        """
        b = self.row_block_elems if budget is None else budget
        step = max(1, b // max(per_row, 1))
        return [slice(s, min(n_rows, s + step)) for s in range(0, n_rows, step)] or [slice(0, 0)]

    def run_blocks(self, fn: Any, blocks: Any, n_threads: Any = None) -> list[Any]:
        """``[fn(b) for b in blocks]``: NumPy spreads the blocks over rfkit's thread pool.

        NumPy releases the GIL inside its ufuncs and BLAS, so blocks run concurrently; BLAS is
        held at one thread meanwhile, so the results do not depend on the number of threads
        (:mod:`rfkit._parallel`). Other libraries run the blocks in order (their own kernels
        are parallel).
        """
        blocks = list(blocks)
        if not self.uses_thread_pool:
            return [fn(b) for b in blocks]
        return run_blocks(fn, blocks, resolve_threads(n_threads, "rfkit"))

    def matmul(self, A: Any, B: Any, n_threads: Any = None) -> Any:
        """``A @ B`` for ``A`` (..., n, k), ``B`` (..., k, m); on NumPy in row blocks on the thread pool."""
        if self.name != "numpy":
            return A @ B
        n, m = A.shape[-2], B.shape[-1]
        lead = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        blocks = self.row_blocks(n, math.prod(lead) * (A.shape[-1] + m), budget=1 << 20)
        if len(blocks) <= 1:
            return np.matmul(A, B)
        out = np.empty(lead + (n, m), dtype=np.result_type(A, B))

        def one(rows: slice) -> None:
            np.matmul(A[..., rows, :], B, out=out[..., rows, :])

        self.run_blocks(one, blocks, n_threads)
        return out

    @property
    def library_version(self) -> str:
        """Version of the array library (for provenance)."""
        mod = np if self.name == "numpy" else __import__(self.name)
        return str(getattr(mod, "__version__", "unknown"))

    @property
    def device_name(self) -> str:
        """A readable name of the device: the GPU's model for CUDA devices, else the device."""
        dev = str(self.device)
        if self.name == "torch" and dev.startswith("cuda"):
            import torch

            return str(torch.cuda.get_device_name(self.device))
        if self.name == "cupy":
            props = _cupy().cuda.runtime.getDeviceProperties(self.device.id)
            return str(props["name"].decode() if isinstance(props["name"], bytes) else props["name"])
        if dev.lower().startswith("cpu"):
            import platform

            return f"CPU ({platform.machine()})"
        return dev

    def dtype(self, name: str) -> Any:
        """The namespace's dtype object for ``"float32"``/``"float64"``/``"bool"``/``"int64"``."""
        return getattr(self.xp, name)

    def dtype_name(self, dtype: Any) -> str:
        """``"float32"``, ``"float64"`` or the library's own name for another dtype."""
        xp = self.xp
        for nm in ("float32", "float64", "float16", "bool", "int64", "int32"):
            if dtype == getattr(xp, nm, None):
                return nm
        return str(dtype).replace("torch.", "").replace("array_api_strict.", "")

    def asarray(self, a: Any, dtype: Any = None) -> Any:
        """Move a NumPy array (or Python data) to this backend and device, cast to ``dtype``.

        This is how draws made by NumPy Generators reach the input's device.
        """
        if self.name == "numpy":
            return np.asarray(a, dtype=dtype)
        if isinstance(a, np.ndarray | np.generic) and dtype is not None:
            a = a.astype(_NUMPY_OF[self.dtype_name(dtype)], copy=False)
        if self.name == "torch":
            import torch

            if isinstance(a, np.ndarray):
                a = np.ascontiguousarray(a)
                if not a.flags.writeable:  # torch refuses read-only buffers
                    a = a.copy()
            out = torch.as_tensor(a, device=self.device)
            return out if dtype is None else out.to(dtype)
        return self.xp.asarray(a, dtype=dtype, device=self.device)

    def to_numpy(self, a: Any) -> np.ndarray:
        """A host NumPy copy (or view) of an array of this backend."""
        return to_numpy(a)

    def from_host(self, cache: dict[tuple[Any, ...], Any], key: str, value: np.ndarray, dtype: Any) -> Any:
        """``value`` (a NumPy parameter) on this backend, device and ``dtype``, cached in ``cache``.

        Draws keep their parameters (directions from NumPy Generators) on the host and move
        them once per (library, device, dtype).
        """
        k = (key, self.name, str(self.device), self.dtype_name(dtype))
        out = cache.get(k)
        if out is None:
            out = cache[k] = self.asarray(value, dtype=dtype)
        return out

    def finfo(self, dtype: Any) -> Any:
        return self.xp.finfo(dtype)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.xp.zeros(shape, dtype=dtype, device=self.device)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.xp.empty(shape, dtype=dtype, device=self.device)

    def full(self, shape: tuple[int, ...], value: float, dtype: Any) -> Any:
        return self.xp.full(shape, value, dtype=dtype, device=self.device)

    def arange(self, n: int) -> Any:
        return self.xp.arange(n, device=self.device)

    # ------------------------------------------------------------------ shims
    def exp_(self, a: Any) -> Any:
        """``exp`` in place where the library allows it (NumPy, CuPy, PyTorch; not under autograd)."""
        if not self.inplace_ok:
            return self.xp.exp(a)
        if self.name in ("numpy", "cupy"):
            mod = np if self.name == "numpy" else _cupy()
            return mod.exp(a, out=a)
        if self.name == "torch":
            return a.exp_()
        return self.xp.exp(a)

    def update(self, a: Any, op: str, b: Any) -> Any:
        """``a op= b`` for ``op`` in ``+ - * /``: in place on a work array, a new array under autograd."""
        return _UPDATE[op][self.inplace_ok](a, b)

    def detached(self, a: Any) -> Any:
        """``a`` without autograd history (PyTorch's ``detach``), for checks that only read values."""
        return a.detach() if self.name == "torch" else a

    def matmul_into(self, a: Any, b: Any, out: Any, index: Any) -> None:
        """``out[index] = a @ b`` without a temporary where the library allows it."""
        if self.name == "numpy":
            np.matmul(a, b, out=out[index])
        else:
            out[index] = a @ b

    def cummax(self, a: Any, axis: int = -1) -> Any:
        """Cumulative maximum along ``axis`` (not in the array API standard; float arrays)."""
        if self.name == "numpy":
            return np.maximum.accumulate(a, axis=axis)
        if self.name == "torch":
            import torch

            return torch.cummax(a, dim=axis).values
        # CuPy lacks maximum.accumulate, the strict namespace has no scan: a log-step
        # (Hillis-Steele) scan of whole-array maxima, ceil(log2 n) passes
        xp = self.xp
        ax = axis % a.ndim
        out = xp.moveaxis(a, ax, -1)
        n = int(out.shape[-1])
        k = 1
        while k < n:
            pad = xp.full(tuple(out.shape[:-1]) + (k,), -math.inf, dtype=out.dtype, device=self.device)
            out = xp.maximum(out, xp.concat([pad, out[..., : n - k]], axis=-1))
            k *= 2
        return xp.moveaxis(out, -1, ax)

    def logsumexp(self, a: Any, axis: int = -1, *, overwrite: bool = False) -> Any:
        """``log(sum(exp(a)))`` along ``axis``; ``-inf`` for an all ``-inf`` slice.

        ``overwrite=True``: ``a`` is a work array the caller no longer needs, and NumPy computes
        in it (two passes fewer over it; the same numbers).
        """
        xp = self.xp
        mx = xp.max(a, axis=axis, keepdims=True)
        mx = xp.where(xp.isfinite(mx), mx, xp.zeros_like(mx))
        if overwrite and self.name == "numpy" and isinstance(a, np.ndarray) and a.flags.writeable:
            np.subtract(a, mx, out=a)
            np.exp(a, out=a)
            with np.errstate(divide="ignore"):
                out = np.log(np.sum(a, axis=axis))
            return out + np.squeeze(mx, axis=axis)
        with np.errstate(divide="ignore"):
            out = xp.log(xp.sum(xp.exp(a - mx), axis=axis))
        return out + xp.squeeze(mx, axis=axis)

    def signed_logsumexp(self, logabs: Any, sign: Any | None, axis: int = -1) -> tuple[Any, Any]:
        """Sign and ``log|sum(sign * exp(logabs))|`` along ``axis`` (sign 0 where the sum is 0)."""
        xp = self.xp
        if sign is None:
            out = self.logsumexp(logabs, axis=axis)
            return xp.ones_like(out), out
        mx = xp.max(logabs, axis=axis, keepdims=True)
        mx = xp.where(xp.isfinite(mx), mx, xp.zeros_like(mx))
        s = xp.sum(sign * xp.exp(logabs - mx), axis=axis)
        with np.errstate(divide="ignore"):
            out = xp.log(xp.abs(s)) + xp.squeeze(mx, axis=axis)
        return xp.sign(s), out

    def any(self, a: Any) -> bool:
        return bool(self.xp.any(a))

    def count(self, a: Any) -> int:
        """Number of true entries of a boolean array (one kernel and one read-back on an accelerator)."""
        if self.name == "numpy":
            return int(np.count_nonzero(a))
        if self.name in ("torch", "cupy"):
            return int(self.native.count_nonzero(a))
        return int(self.xp.sum(self.xp.astype(a, self.xp.int64)))

    def count_at_most(self, rows: Any, values: Any) -> Any:
        """``#{j : rows[i, j] <= values[i, s]}``, (c, S) int64, for ``rows`` (c, m) non-decreasing along each
        row; NumPy: one binary search per row (same counts, no (c, S, m) comparison array)."""
        if self.name == "numpy":
            return np.stack([np.searchsorted(r, v, side="right") for r, v in zip(rows, values)]).astype(
                np.int64
            )
        xp = self.xp
        return xp.sum(xp.astype(rows[:, None, :] <= values[:, :, None], xp.int64), axis=-1)

    def sqnorm(self, a: Any) -> Any:
        """Squared norms of the rows of ``a`` (``vecdot(a, a)`` along the last axis).

        NumPy: ``vecdot`` (the numbers rfkit always had); PyTorch and CuPy: an elementwise square and
        a row sum, two kernels instead of PyTorch's batched 1 x d x 1 matrix products.
        """
        if self.name in ("torch", "cupy"):
            return self.xp.sum(a * a, axis=-1)
        return self.xp.vecdot(a, a, axis=-1)

    def int64_bits_as_float64(self, a: Any) -> Any:
        """The bits of an int64 array read as float64 (a view where the library has one)."""
        if self.name == "torch":
            return a.view(self.native.float64)
        if self.name in ("numpy", "cupy"):
            return a.view(np.float64)
        raise BackendError(
            f"{self.name} arrays cannot be reinterpreted bit for bit (no view of another dtype)."
        )

    def ndtri(self, u: Any) -> Any:
        """The standard normal quantile function, on this backend's device."""
        if self.name == "torch":
            return self.native.special.ndtri(u)
        if self.name == "cupy":  # pragma: no cover - CuPy machines only
            from cupyx.scipy.special import ndtri as cupy_ndtri

            return cupy_ndtri(u)
        if self.name == "numpy":
            from scipy.special import ndtri as host_ndtri  # SciPy's special loads when first used

            return host_ndtri(u)
        raise BackendError(f"{self.name} has no normal quantile function rfkit can use.")

    def max_abs(self, a: Any) -> Any:
        """``max |a|`` as a 0-d array of ``a``'s library (NaN if ``a`` holds a NaN), without a
        temporary where the library has a fused reduction (one kernel on an accelerator)."""
        if self.name == "torch":
            return self.native.linalg.vector_norm(a, math.inf)
        if self.name == "numpy":
            return np.maximum(np.max(a), -np.min(a))
        return self.xp.max(self.xp.abs(a))

    def scalar(self, value: float, dtype: Any) -> Any:
        """A 0-d array ``value`` of ``dtype`` on this backend's device, made once and cached
        (a new one would be a host-to-device copy on every call on an accelerator)."""
        key = ("scalar", float(value), self.name, str(self.device), self.dtype_name(dtype))
        with _SCALAR_LOCK:
            out = _SCALARS.get(key)
            if out is None:
                out = _SCALARS[key] = self.xp.asarray(value, dtype=dtype, device=self.device)
        return out

    @property
    def native(self) -> ModuleType:
        """The library itself (``torch``, ``cupy``), for the few fused operations the standard lacks."""
        return importlib.import_module(self.name)

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, device={self.device!r})"


#: device scalars made by :meth:`Backend.scalar`
_SCALARS: dict[tuple[Any, ...], Any] = {}
_SCALAR_LOCK = threading.Lock()

#: ``op -> (new array, in place)`` of :meth:`Backend.update`
_UPDATE = {
    o: (getattr(operator, n), getattr(operator, "i" + n))
    for o, n in zip("+-*/", ("add", "sub", "mul", "truediv"))
}
_NUMPY_OF = {"float32": np.float32, "float64": np.float64, "bool": np.bool_, "int64": np.int64}


def _cupy() -> ModuleType:
    import cupy

    return cupy


_NUMPY: list[Backend] = []


def _numpy_backend() -> Backend:
    """The NumPy backend (the reference path), made on first use.

    ``array_api_compat``'s NumPy wrapper takes about 0.1 s to import, so it loads when the first
    call computes, not with ``import rfkit``; the module attribute ``NUMPY`` returns it.
    """
    if not _NUMPY:
        _NUMPY.append(Backend("numpy", _compat().array_namespace(np.empty(0)), "cpu"))
    return _NUMPY[0]


def __getattr__(name: str) -> Backend:
    if name == "NUMPY":  # the NumPy backend, made on first use (see _numpy_backend)
        return _numpy_backend()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_CACHE: dict[tuple[str, str], Backend] = {}


def _library(obj: Any) -> str | None:
    """Library name of an array object, None for plain Python data and NumPy arrays."""
    if isinstance(obj, np.ndarray | np.generic):
        return "numpy"
    mod = type(obj).__module__.split(".", 1)[0]
    if mod == "torch":
        return "torch"
    if mod == "cupy":
        return "cupy"
    if mod == "array_api_strict":
        return "array_api_strict"
    if hasattr(obj, "__array_namespace__") or mod in ("jax", "jaxlib", "dask", "sparse", "ndonnx", "dpnp"):
        return f"unsupported:{mod}"
    return None


def is_array(obj: Any) -> bool:
    """True for an array of a supported library (NumPy, PyTorch, CuPy, array_api_strict)."""
    lib = _library(obj)
    return lib is not None and not lib.startswith("unsupported")


def backend_for(library: str, device: Any = None) -> Backend:
    """The backend of a library by name, e.g. ``backend_for("torch", "cuda")``.

    Raises
    ------
    BackendNotInstalledError
        If the library is not installed.
    BackendError
        For a library rfkit does not compute on.
    """
    if library not in BACKENDS:
        raise BackendError(f"The `backend` must be one of {list(BACKENDS)}. Got {library!r} instead.")
    if library == "numpy":
        if device not in (None, "cpu"):
            raise BackendError(f"The NumPy backend computes on the CPU only. Got device={device!r} instead.")
        return _numpy_backend()
    try:
        mod = __import__(library)
    except ImportError:
        raise BackendNotInstalledError(
            f"backend {library!r} needs the package {library!r}, which is not installed "
            f"(pip install {'array-api-strict' if library == 'array_api_strict' else library})."
        ) from None
    try:
        if library == "torch":
            dev = mod.device("cpu" if device is None else device)
            if dev.type == "meta":
                raise ValueError("the meta device holds no data")
            probe = mod.empty(0, device=dev)
        elif library == "cupy":
            with mod.cuda.Device(0 if device is None else device):
                probe = mod.empty(0)
        else:
            probe = mod.asarray([0.0]) if device is None else mod.asarray([0.0], device=device)
    except Exception as exc:  # torch raises RuntimeError, AssertionError (no CUDA build), ValueError ...
        raise BackendError(
            f"The `device` {device!r} is not usable with {library}: {exc}. "
            f"Available: {available_devices(library, mod)}."
        ) from None
    return _backend_of(probe)


def _backend_of(arr: Any) -> Backend:
    lib = _library(arr)
    if lib == "numpy":
        return _numpy_backend()
    c = _compat()
    dev = c.device(arr)
    key = (str(lib), str(dev))
    bk = _CACHE.get(key)
    if bk is None:
        bk = Backend(str(lib), c.array_namespace(arr), dev)
        _CACHE[key] = bk
    return bk


def get_backend(*named: tuple[str, Any]) -> Backend:
    """Resolve the backend of one public call from its ``(argument name, value)`` pairs.

    Plain Python data (lists, tuples, scalars) and ``None`` join whatever library the
    arrays use; if there are no arrays the call runs on NumPy.

    Raises
    ------
    BackendError
        An array of an unsupported library (named with its argument), arrays of two libraries
        in one call, arrays on two devices (``Q`` on the GPU, ``K`` on the CPU: rfkit never
        copies between devices silently), or PyTorch tensors on the ``meta`` device (no data).
    """
    arrays: list[tuple[str, str, Any]] = []
    for name, value in named:
        lib = "numpy" if type(value) is np.ndarray else _library(value)
        if lib is None:
            continue
        if lib.startswith("unsupported:"):
            raise BackendError(
                f"`{name}` is an array of {lib.split(':', 1)[1]!r} ({type(value).__name__}); rfkit computes on "
                f"{', '.join(BACKENDS)} arrays. Convert it explicitly (e.g. np.asarray({name}))."
            )
        arrays.append((name, lib, value))
    if all(lib == "numpy" for _, lib, _ in arrays):
        return _numpy_backend()
    first_name, first_lib, first_value = arrays[0]
    for name, lib, _ in arrays[1:]:
        if lib != first_lib:
            raise BackendError(
                f"`{first_name}` is a {first_lib} array but `{name}` is a {lib} array: one call computes on one "
                "library. Convert them explicitly to the same library (rfkit never mixes them silently)."
            )
    first = _backend_of(first_value)
    for name, _, value in arrays[1:]:
        bk = _backend_of(value)
        if bk is not first:
            raise BackendError(
                f"`{first_name}` is on device {first.device!s} but `{name}` is on device {bk.device!s}: rfkit "
                "never copies between devices silently. Move them to one device explicitly."
            )
    if first.name == "torch" and getattr(first.device, "type", None) == "meta":
        shape, dtype = tuple(first_value.shape), first_value.dtype
        raise BackendError(
            f"`{first_name}` is on the meta device (shape {shape}, dtype {dtype}): meta tensors hold no data and "
            "rfkit estimates from data. Move the arrays to a device that holds it (cpu, cuda), e.g. `.to('cpu')`."
        )
    if (
        first.name == "torch"
        and first.native.is_grad_enabled()
        and any(getattr(v, "requires_grad", False) for _, _, v in arrays)
    ):
        key = (f"{first.name}+grad", str(first.device))  # autograd records the call: no in-place writes
        return _CACHE.setdefault(key, dataclasses.replace(first, inplace_ok=False))
    return first


def to_numpy(a: Any) -> np.ndarray:
    """Host NumPy array of any supported array (a copy from an accelerator)."""
    if isinstance(a, np.ndarray):
        return a
    lib = _library(a)
    if lib == "torch":
        return a.detach().cpu().numpy()
    if lib == "cupy":
        return a.get()
    if lib == "array_api_strict":
        return np.asarray(np.from_dlpack(a))
    return np.asarray(a)
