"""Data-frame backends of the twin executor: pandas on the host, cudf (or a stand-in) on the device.

A backend turns Arrow tables into its frames and back (:meth:`Backend.from_arrow`,
:meth:`Backend.to_arrow`) and concatenates frames; everything else an operator
does uses the part of the DataFrame API that pandas and cudf share (boolean
masks, ``assign``, ``groupby(...).agg({...})``, ``merge``, ``sort_values``,
``drop_duplicates``, ``astype``).  Moving a frame between two backends goes
through Arrow: that is the host <-> device transition whose cost the device
mapper's transition term models.

Registered backends (:func:`get_backend`):

``pandas``
    The host.  The CPU side of every plan, and the GPU side too when no GPU is
    wanted (``gpu_backend="pandas"``: one backend, so no transitions at all).
``pandas-device``
    pandas standing in for a second device: its frames are a
    :class:`DeviceFrame` subclass, and every transition really round-trips
    through Arrow, so the transition paths of the executor run (and the
    executor's check that each operator only sees frames of its own backend
    bites) without a GPU.  Used by the tests.
``cudf``
    RAPIDS cudf on the GPU, imported lazily: :func:`cudf_available` first
    imports it in a child process (``import cudf`` without a usable GPU may
    raise anything or kill the process), then in this one inside
    ``try/except Exception``.  Install it with the ``gpu`` extra
    (``pip install 'lmstream_kit[gpu]'``).

Examples
--------
>>> import pyarrow as pa
>>> host, device = get_backend("pandas"), get_backend("pandas-device")
>>> frame = device.from_arrow(pa.table({"x": [1, 2, 3]}))
>>> type(frame).__name__, device.owns(frame), host.owns(frame)
('DeviceFrame', True, False)
>>> back = host.from_arrow(device.to_arrow(frame))
>>> host.owns(back), back["x"].tolist()
(True, [1, 2, 3])
>>> get_backend("numpy")
Traceback (most recent call last):
...
lmstream_kit.exceptions.UnknownNameError: unknown twin backend 'numpy'; known: cudf, pandas, pandas-device
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Sequence

import pandas as pd
import pyarrow as pa

from ..exceptions import ConfigError
from ..registry import Registry

__all__ = [
    "Backend",
    "CudfBackend",
    "DeviceFrame",
    "PandasBackend",
    "PandasDeviceBackend",
    "BACKENDS",
    "GPU_EXTRA_HINT",
    "cudf_available",
    "get_backend",
    "transfer",
]

#: what to install for the cudf backend
GPU_EXTRA_HINT = "install the gpu extra on a machine with an NVIDIA GPU: pip install 'lmstream_kit[gpu]'"
#: set to 1 to skip the cudf probe (and never use cudf) on this machine
DISABLE_ENV = "LMSTREAM_KIT_NO_CUDF"
#: the probe run in a child process; prints 3 when cudf works
_PROBE = "import cudf; print(int(cudf.Series([1, 2]).sum()))"
PROBE_TIMEOUT_S = 60.0


class Backend:
    """One place frames live and operators run: the host (pandas) or a device.

    Attributes
    ----------
    name : str
        Registry name.
    host : bool
        Whether the frames live in host memory.  Reading the batch's Arrow
        table into a non-host backend, moving a frame between two backends
        and writing the result from a non-host backend are transitions.
    """

    name = "backend"
    host = True

    def from_arrow(self, table: pa.Table) -> Any:
        """A frame of this backend holding ``table``."""
        raise NotImplementedError

    def to_arrow(self, frame) -> pa.Table:
        """``frame`` as an Arrow table (no index column)."""
        raise NotImplementedError

    def concat(self, frames: Sequence[Any]) -> Any:
        """Rows of ``frames`` (or values of Series) one after the other, with a fresh index."""
        raise NotImplementedError

    def owns(self, frame) -> bool:
        """Whether ``frame`` is a frame of this backend."""
        raise NotImplementedError

    def adopt(self, frame) -> Any:
        """``frame`` typed as this backend's frame (an operator's result)."""
        return frame

    def __repr__(self) -> str:
        return f"<twin backend {self.name}>"


def _plain(kind: str) -> bool:
    return kind in "biuf"  # bool, integers, floats: no nulls to mind, no objects


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _arrow_to_pandas(table: pa.Table) -> pd.DataFrame:
    # column by column is several times faster than Table.to_pandas for small numeric batches
    if all(_numeric(kind) for kind in table.schema.types) and not any(c.null_count for c in table.columns):
        return pd.DataFrame({name: table.column(name).to_numpy() for name in table.column_names})
    return table.to_pandas()


def _pandas_to_arrow(frame) -> pa.Table:
    if all(_plain(dtype.kind) for dtype in frame.dtypes):
        return pa.table({name: frame[name].to_numpy() for name in frame.columns})
    return pa.Table.from_pandas(pd.DataFrame(frame), preserve_index=False)


class PandasBackend(Backend):
    """pandas DataFrames in host memory."""

    name = "pandas"
    host = True

    def from_arrow(self, table: pa.Table) -> pd.DataFrame:
        return _arrow_to_pandas(table)

    def to_arrow(self, frame) -> pa.Table:
        return _pandas_to_arrow(frame)

    def concat(self, frames: Sequence[Any]) -> pd.DataFrame:
        return pd.concat(list(frames), ignore_index=True)

    def owns(self, frame) -> bool:
        return isinstance(frame, pd.DataFrame) and not isinstance(frame, DeviceFrame)

    def adopt(self, frame) -> pd.DataFrame:
        return pd.DataFrame(frame) if isinstance(frame, DeviceFrame) else frame


class DeviceFrame(pd.DataFrame):
    """A pandas DataFrame standing for a frame in device memory (``pandas-device`` backend)."""

    @property
    def _constructor(self):
        return DeviceFrame


class PandasDeviceBackend(Backend):
    """pandas playing a second device: frames are :class:`DeviceFrame`, transitions go through Arrow."""

    name = "pandas-device"
    host = False

    def from_arrow(self, table: pa.Table) -> DeviceFrame:
        return DeviceFrame(_arrow_to_pandas(table))

    def to_arrow(self, frame) -> pa.Table:
        return _pandas_to_arrow(frame)

    def concat(self, frames: Sequence[Any]):
        out = pd.concat(list(frames), ignore_index=True)
        return DeviceFrame(out) if isinstance(out, pd.DataFrame) else out

    def owns(self, frame) -> bool:
        return isinstance(frame, DeviceFrame)

    def adopt(self, frame) -> DeviceFrame:
        return frame if isinstance(frame, DeviceFrame) else DeviceFrame(frame)


class CudfBackend(Backend):
    """cudf DataFrames in GPU memory (needs :func:`cudf_available`)."""

    name = "cudf"
    host = False

    def __init__(self, module) -> None:
        self.cudf = module

    def from_arrow(self, table: pa.Table):
        return self.cudf.DataFrame.from_arrow(table)

    def to_arrow(self, frame) -> pa.Table:
        return frame.to_arrow(preserve_index=False)

    def concat(self, frames: Sequence[Any]):
        return self.cudf.concat(list(frames), ignore_index=True)

    def owns(self, frame) -> bool:
        return isinstance(frame, self.cudf.DataFrame)


def transfer(frame, source: Backend, target: Backend):
    """Move ``frame`` from ``source`` to ``target`` (through Arrow); the same frame if they are one.

    >>> host, device = get_backend("pandas"), get_backend("pandas-device")
    >>> moved = transfer(host.from_arrow(pa.table({"x": [1]})), host, device)
    >>> device.owns(moved), transfer(moved, device, device) is moved
    (True, True)
    """
    if source is target:
        return frame
    return target.from_arrow(source.to_arrow(frame))


# ---------------------------------------------------------------------------------------- cudf probe

_probe_lock = threading.Lock()
_probe_result: tuple[bool, str] | None = None
_cudf_module = None


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _probe_in_child(timeout_s: float) -> tuple[bool, str]:
    """Import cudf and sum a Series in a child process; ``(works, why)``."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return False, f"'import cudf' did not finish within {timeout_s:g} s in a child process"
    except OSError as exc:
        return False, f"could not start the cudf probe: {exc}"
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return False, f"'import cudf' crashed the probe process ({name})"
    if done.returncode != 0:
        why = _one_line(done.stderr) or f"exit status {done.returncode}"
        return False, f"'import cudf' failed: {why}"
    if done.stdout.strip() != "3":
        return False, f"cudf.Series([1, 2]).sum() gave {done.stdout.strip()!r} instead of 3"
    return True, "cudf works"


def cudf_available(timeout_s: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Whether cudf can be used here, and why not (the answer is cached per process).

    cudf is first imported in a child process with a timeout, because without a
    usable GPU ``import cudf`` may raise anything or crash the interpreter; only
    when that worked is it imported here, inside ``try/except Exception``.
    Setting the environment variable ``LMSTREAM_KIT_NO_CUDF=1`` skips the probe.

    Returns
    -------
    (bool, str)
        ``(True, "cudf <version> works")`` or ``(False, reason)``.
    """
    global _probe_result, _cudf_module
    with _probe_lock:
        if _probe_result is not None:
            return _probe_result
        if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
            result = (False, f"cudf disabled by {DISABLE_ENV}")
        elif importlib.util.find_spec("cudf") is None:
            result = (False, f"cudf is not installed ({GPU_EXTRA_HINT})")
        else:
            result = _probe_in_child(timeout_s)
            if result[0]:
                try:
                    import cudf  # noqa: PLC0415  (lazy on purpose: see the docstring)

                    if int(cudf.Series([1, 2]).sum()) != 3:
                        raise RuntimeError("cudf.Series([1, 2]).sum() is not 3")
                    _cudf_module = cudf
                    result = (True, f"cudf {getattr(cudf, '__version__', '?')} works")
                except Exception as exc:  # anything: a broken driver raises all sorts
                    why = _one_line(str(exc)) or type(exc).__name__
                    result = (False, f"'import cudf' failed in this process: {why}")
        _probe_result = result
        return result


def _reset_cudf_probe() -> None:
    """Forget the cached probe answer (tests)."""
    global _probe_result, _cudf_module
    with _probe_lock:
        _probe_result = None
        _cudf_module = None


# ---------------------------------------------------------------------------------------- registry

#: name -> factory of the backend
BACKENDS: Registry[Callable[[], Backend]] = Registry("twin backend")
_instances: dict[str, Backend] = {}


def _make_cudf() -> Backend:
    ok, why = cudf_available()
    if not ok:
        raise ConfigError(f"the cudf twin backend is unavailable: {why}; {GPU_EXTRA_HINT}")
    return CudfBackend(_cudf_module)


BACKENDS.register("pandas", PandasBackend)
BACKENDS.register("pandas-device", PandasDeviceBackend)
BACKENDS.register("cudf", _make_cudf)


def get_backend(name: str) -> Backend:
    """The backend registered as ``name`` (one instance per name and process).

    Raises
    ------
    UnknownNameError
        For a name that is not registered (the message lists the known ones).
    ConfigError
        For ``"cudf"`` when cudf does not work here (the message says why).
    """
    factory = BACKENDS.get(name)
    key = str(name).lower()
    if key not in _instances:
        _instances[key] = factory()
    return _instances[key]
