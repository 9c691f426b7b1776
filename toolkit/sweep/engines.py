"""Where sweep cells run: in this process, on a local process pool, or on a Ray cluster.

Every engine runs the same :func:`run_cell`: the worker opens the store, replays the cell
through the kind's normal entry point and writes the run's tables together with the
cell's ``sweeps`` row in one :meth:`Store.transaction`, so a killed worker leaves either
both or neither. Commits take the store's exclusive ``flock``, which holds across
processes (and across hosts on a shared filesystem whose locks are coherent, e.g. NFSv4
or CephFS). Workers never share a store object; the parent only writes rows for skipped
and failed cells.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from toolkit.registry import Registry

CONNECT_TIMEOUT_S = 30.0
"""How long ``--engine ray --address`` waits for a cluster (``--connect-timeout-s``)."""


@dataclass(frozen=True)
class CellTask:
    """One cell to run: everything a worker needs, picklable."""

    store_root: str
    kind: str
    config: Any
    row: dict[str, Any]  # the cell's ``sweeps`` row, less run_id/status/error/seconds
    threads: int  # replay threads inside the cell (results do not depend on it)
    #: The sweep's driver: (host name, process id). A worker on that host whose driver is
    #: gone does not commit the cell (a Ray worker outlives a SIGKILLed driver).
    driver: tuple[str, int] | None = None

    @property
    def index(self) -> int:
        return int(self.row["cell"])


@dataclass(frozen=True)
class CellOutcome:
    index: int
    status: str  # "done" | "failed"
    run_id: str | None
    error: str | None
    seconds: float


def cell_key(sweep_id: str, index: int) -> str:
    """Store key of one cell's ``sweeps`` row."""
    return f"{sweep_id}.{index:05d}"


_WORKER_STORES: dict[tuple[str, int], Any] = {}  # (root, inode) -> Store, per process


def _worker_store(root: str) -> Any:
    """The store at ``root``, opened once per worker process (opening lists every table,
    which costs more than a small cell); a store directory recreated since is reopened."""
    import os

    from toolkit.store import Store

    key = (root, os.stat(root).st_ino)
    if key not in _WORKER_STORES:
        for old in [k for k in _WORKER_STORES if k[0] == root]:
            _WORKER_STORES.pop(old).close()
        _WORKER_STORES[key] = Store(root, create=False)
    return _WORKER_STORES[key]


def run_cell(task: CellTask, store: Any = None) -> CellOutcome:
    """Replay one cell and record it (see the module docstring); a failure is returned,
    not raised, so the parent applies the sweep's ``on_error`` policy. ``store``: the
    caller's open store (cells run in this process), else the worker's own."""
    from toolkit.sweep.kinds import kinds

    t0 = time.perf_counter()
    try:
        kind = kinds.get(task.kind)
        store = store if store is not None else _worker_store(task.store_root)
        with store.transaction():
            run_id = kind.run(store, task.config, task.threads)
            _check_driver(task.driver)  # raising here discards the cell's staged files
            seconds = time.perf_counter() - t0
            row = {**task.row, "run_id": run_id, "status": "done", "error": None,
                   "seconds": seconds}
            store.write_row("sweeps", cell_key(row["sweep_id"], task.index), row,
                            replace=True)
        return CellOutcome(task.index, "done", run_id, None, seconds)
    except Exception as e:  # recorded or re-raised by the parent
        from toolkit.errors import ToolkitError
        from toolkit.registry import RegistryError

        if isinstance(e, ToolkitError | RegistryError | ValueError):
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        else:  # an unexpected failure: keep where it happened
            where = traceback.extract_tb(e.__traceback__)[-1]
            msg = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
        return CellOutcome(task.index, "failed", None, msg, time.perf_counter() - t0)


class DriverGone(RuntimeError):
    """The sweep's driver died: the cell is not committed."""


def driver_id() -> tuple[str, int]:
    """This process as a sweep driver: (host name, pid)."""
    import os
    import socket

    return socket.gethostname(), os.getpid()


def _check_driver(driver: tuple[str, int] | None) -> None:
    import os
    import socket

    from toolkit.runtime.pool import parent_alive

    if driver is None or driver[1] == os.getpid() or driver[0] != socket.gethostname():
        return
    if not parent_alive(driver[1]):
        raise DriverGone(f"the sweep's driver (pid {driver[1]}) is gone; cell not committed")


class Engine(Protocol):
    """Runs cells and yields their outcomes as they finish (any order)."""

    name: str
    cell_threads: int  # replay threads inside one cell

    def run(self, tasks: list[CellTask], store: Any = None) -> Iterator[CellOutcome]:
        """``store``: the caller's open store, for engines that run cells in-process."""

    def cancel(self) -> None:
        """Drop cells not yet started (cells already running finish and commit)."""

    def close(self) -> None: ...


WORKER_PROCESS_BYTES = 300 << 20
"""What one spawned sweep worker holds before its cell's own data: the interpreter,
NumPy, numba, Arrow, Polars and DuckDB loaded."""


class LocalEngine:
    """A process pool of ``workers`` processes (spawned: no inherited locks or threads);
    ``workers=1`` runs every cell in this process, one after another.

    A worker that dies (the OOM killer's SIGKILL, a crash in compiled code) fails only the
    cell it was running, recorded with the signal; the pool is rebuilt for the other cells.
    Each worker marks the cell it starts in a scratch directory, which is how that cell is
    told apart from the ones merely queued behind it."""

    name = "local"

    def __init__(self, workers: int | None = None, address: str | None = None) -> None:
        from toolkit.runtime.pool import resolve_workers

        if address:
            raise ValueError("--address applies to --engine ray")
        self.workers = resolve_workers(workers)
        self._pool: ProcessPoolExecutor | None = None
        self._pending: dict[Future[CellOutcome], CellTask] = {}
        self._marks: str | None = None

    @property
    def cell_threads(self) -> int:
        return self.workers if self.workers == 1 else 1

    def _new_pool(self, n: int) -> ProcessPoolExecutor:
        from toolkit.runtime.memory import check_memory

        check_memory(n * WORKER_PROCESS_BYTES,
                     f"--workers {self.workers} ({n} sweep processes of ~"
                     f"{WORKER_PROCESS_BYTES >> 20} MiB each)")
        import os

        return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(os.getpid(),))

    def run(self, tasks: list[CellTask], store: Any = None) -> Iterator[CellOutcome]:
        import tempfile

        if self.workers == 1 or len(tasks) <= 1:
            for t in tasks:
                yield run_cell(t, store)
            return
        self._marks = tempfile.mkdtemp(prefix="toolkit-sweep-")
        todo = list(tasks)
        while todo:
            n = min(self.workers, len(todo))
            self._pool = self._new_pool(n)
            self._pending = {self._pool.submit(_pool_cell, t, self._marks): t for t in todo}
            todo = []
            procs: dict[int, Any] = {}
            finished = 0
            while self._pending:
                procs.update(getattr(self._pool, "_processes", None) or {})
                done, _ = wait(self._pending, return_when=FIRST_COMPLETED, timeout=1.0)
                for f in done:
                    task = self._pending.pop(f)
                    if f.cancelled():
                        continue
                    try:
                        out = f.result()
                    except BrokenProcessPool:
                        todo.append(task)
                        continue
                    finished += 1
                    yield out
            if todo:  # the pool broke: fail the cells whose worker died, rerun the rest
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
                dead = self._dead_cells(procs)
                for t in [t for t in todo if t.index in dead]:
                    todo.remove(t)
                    yield CellOutcome(t.index, "failed", None, dead[t.index], 0.0)
                if not dead and not finished:  # nothing learnt: do not loop
                    for t in todo:
                        yield CellOutcome(t.index, "failed", None,
                                          "the worker pool broke before this cell ran", 0.0)
                    todo = []

    def _dead_cells(self, procs: dict[int, Any]) -> dict[int, str]:
        """Cells whose worker died while running them -> how it died."""
        import os
        import signal

        out = {}
        for name in os.listdir(self._marks or "."):
            path = os.path.join(self._marks or ".", name)
            with contextlib.suppress(OSError, ValueError):
                with open(path, encoding="ascii") as fh:
                    pid = int(fh.read())
                os.remove(path)
                p = procs.get(pid)
                code = p.exitcode if p is not None else None
                if code == -signal.SIGTERM:
                    continue  # stopped by the pool when another worker died: rerun it
                if code is not None and code < 0:
                    try:
                        how = f"killed by {signal.Signals(-code).name}"
                    except ValueError:
                        how = f"killed by signal {-code}"
                else:
                    how = f"exited with code {code}" if code is not None else "died"
                out[int(name)] = (f"worker process {pid} {how} while running this cell "
                                  "(out of memory? see the kernel log)")
        return out

    def cancel(self) -> None:
        for f in self._pending:
            f.cancel()

    def abort(self) -> None:
        """Stop now (Ctrl-C): drop queued cells and terminate running ones; a cell cut off
        before its commit leaves nothing (its staging files are cleaned by a later open).

        Futures are not cancelled here: the pool's manager thread marks every pending
        future broken once the workers die, and on Python 3.11 it raises (and prints a
        traceback) if it meets one already cancelled."""
        if self._pool is not None:
            for p in list((getattr(self._pool, "_processes", None) or {}).values()):
                with contextlib.suppress(Exception):
                    p.terminate()
            self._pool.shutdown(wait=True)
            self._pool = None
        self.close()

    def close(self) -> None:
        import shutil

        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._marks is not None:
            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None


def _init_worker(parent_pid: int) -> None:
    """A pool worker leaves Ctrl-C to the parent, which stops them (one message, not one
    traceback per worker), and exits when the parent dies, even by SIGKILL
    (:func:`toolkit.runtime.pool.die_with_parent`)."""
    import signal

    from toolkit.runtime.pool import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent_pid)


def _pool_cell(task: CellTask, marks: str) -> CellOutcome:
    """:func:`run_cell` in a pool worker, its start marked with this process's id."""
    import os

    mark = os.path.join(marks, str(task.index))
    with open(mark, "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))
    try:
        return run_cell(task)
    finally:
        with contextlib.suppress(OSError):
            os.remove(mark)


class RayEngine:
    """Cells as Ray tasks (one CPU each) on the cluster at ``address``, or on a local Ray
    started for the run with ``workers`` CPUs and shut down after it. If this process is
    already connected to Ray (``ray.init`` in a notebook or test), that cluster is used
    and left running."""

    name = "ray"
    cell_threads = 1

    def __init__(self, workers: int | None = None, address: str | None = None, *,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, verbose: bool = False) -> None:
        if not (connect_timeout_s > 0 and math.isfinite(connect_timeout_s)):
            raise ValueError(f"--connect-timeout-s must be finite and > 0, got "
                             f"{connect_timeout_s}")
        # Ray reads most of its GCS timeouts once, when first imported: set before that,
        # they bound Ray's own attempt (one of at most the timeout, not 20 of 30 s each).
        bounds = _ray_connect_env(connect_timeout_s) if address else {}
        try:
            with _env(bounds):
                import ray
        except ImportError:
            raise ValueError("--engine ray needs Ray: pip install 'kvtier-toolkit[ray]'") \
                from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            if address:
                _probe(address, connect_timeout_s)
            try:
                with _ray_output(verbose), _env(bounds):
                    if address:
                        ray.init(address=address, log_to_driver=False,
                                 logging_level="INFO" if verbose else "ERROR")
                    else:  # "local": a new instance even if a cluster runs on this machine
                        from toolkit.runtime.pool import resolve_workers

                        ray.init(address="local", num_cpus=resolve_workers(workers),
                                 include_dashboard=False, log_to_driver=False,
                                 logging_level="INFO" if verbose else "ERROR")
            except Exception as e:
                where = address or "a new local instance"
                hint = (" (a cluster with token authentication, Ray's default, needs "
                        "RAY_AUTH_MODE=token here and the cluster's ~/.ray/auth_token)"
                        if "auth" in repr(e.__cause__).lower() else "")
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise ValueError(f"cannot connect to Ray at {where}: {first}{hint}") from None
            self._started = True
        self._refs: list[Any] = []

    def run(self, tasks: list[CellTask], store: Any = None) -> Iterator[CellOutcome]:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        self._refs = [remote.remote(t) for t in tasks]
        while self._refs:
            done, self._refs = ray.wait(self._refs, num_returns=1)
            with contextlib.suppress(ray.exceptions.TaskCancelledError):
                yield ray.get(done[0])

    def cancel(self) -> None:
        for r in self._refs:
            self._ray.cancel(r)

    def abort(self) -> None:
        """Stop now (Ctrl-C): cancel every cell, running ones included."""
        for r in self._refs:
            with contextlib.suppress(Exception):
                self._ray.cancel(r, force=True)
        self.close()

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)
"""An HTTP/2 client's first bytes: the connection preface and an empty SETTINGS frame."""


def _ray_connect_env(timeout_s: float) -> dict[str, str]:
    """Ray's own settings that bound one connection attempt by ``timeout_s``."""
    t = str(max(1, math.ceil(timeout_s)))
    return {"RAY_gcs_server_port_wait_time_s": "1",  # attempts of ~1 s each, not 20
            "RAY_py_gcs_connect_timeout_s": t,
            "RAY_gcs_rpc_server_connect_timeout_s": t,
            "RAY_gcs_rpc_server_reconnect_timeout_s": t}


def _probe(address: str, timeout_s: float) -> None:
    """Check that ``address`` answers like a Ray cluster within ``timeout_s``, because Ray
    itself retries for minutes.

    A Ray GCS (and a Ray client server) is a gRPC server, and a gRPC server answers an
    HTTP/2 connection preface with a SETTINGS frame at once. So the probe connects over
    TCP (TLS first when ``RAY_USE_TLS`` is set, as Ray would), sends the preface and
    waits for that frame: a refused or unroutable address, a port that accepts and says
    nothing, and a port that speaks another protocol are each refused in one line naming
    the address and the flag. ``host`` is resolved the way Ray resolves it (a loopback
    address means this node's IP). ``auto`` is left to Ray.
    """
    import os
    import socket

    if address == "auto":
        return
    deadline = time.monotonic() + timeout_s
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--address {address!r}: expected HOST:PORT (ray start --head "
                         "prints it)")
    host = host.strip("[]")
    if not address.startswith("ray://"):
        host = _ray_host(host)
    where = address if host == address.rpartition(":")[0].strip("[]") \
        else f"{address} (as {host}:{port})"
    fail = f"cannot reach Ray at {where} within --connect-timeout-s {timeout_s:g}"

    def left() -> float:
        t = deadline - time.monotonic()
        if t <= 0:
            raise TimeoutError
        return t

    try:
        sock = socket.create_connection((host, int(port)), timeout=left())
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ValueError(f"{fail}: {why}") from None
    try:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            import ssl

            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            sock.settimeout(left())
            try:
                sock = ctx.wrap_socket(sock, server_hostname=host)
            except ssl.SSLError:
                return  # it speaks TLS and wants Ray's certificates, which Ray presents
        sock.settimeout(left())
        sock.sendall(HTTP2_PREFACE)
        got = b""
        while len(got) < 9:
            sock.settimeout(left())
            chunk = sock.recv(9 - len(got))
            if not chunk:
                break
            got += chunk
    except TimeoutError:
        raise ValueError(f"{fail}: the port accepted the connection but did not answer "
                         "(is it a Ray head's GCS port, e.g. 6379?)") from None
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        got = b""  # closed while the preface was on its way
    except OSError as e:
        raise ValueError(f"{fail}: {e.strerror or e}") from None
    finally:
        sock.close()
    if len(got) < 9 or got[3] != 0x04:
        what = "closed the connection" if not got else f"answered {got[:9]!r}"
        raise ValueError(f"{fail}: the port {what}, not as a Ray cluster (gRPC) does "
                         "(is it a Ray head's GCS port, e.g. 6379?)")


def _ray_host(host: str) -> str:
    """``host`` as Ray connects to it: a loopback name or address becomes this node's IP
    (Ray's ``resolve_ip_for_localhost``), so the probe checks what Ray will use."""
    try:
        from ray._private.services import resolve_ip_for_localhost
    except ImportError:  # Ray's private API moved: probe what was given
        return host
    try:
        return resolve_ip_for_localhost(host)
    except Exception:
        return host


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in the environment for the block, except those the user set."""
    import os

    mine = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(mine)
    try:
        yield
    finally:
        for k in mine:
            os.environ.pop(k, None)


@contextlib.contextmanager
def _ray_output(verbose: bool) -> Iterator[None]:
    """Ray's own log lines (its C++ core writes to file descriptor 2) kept off the
    terminal unless ``verbose``; shown after all when the connection fails and verbose."""
    import os
    import sys
    import tempfile

    if verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


engines: Registry[type] = Registry("sweep engine", "toolkit.sweep_engines")
engines.register("local", LocalEngine)
engines.register("ray", RayEngine)
