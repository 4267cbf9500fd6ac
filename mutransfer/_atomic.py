"""Atomic file replacement: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """This process's umask (read by setting it, then setting it back)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and move it over ``path``.

    On any exception (Ctrl-C included) the temporary file is removed and ``path`` is untouched.
    The new file gets the usual permissions (0o666 minus the umask), not mkstemp's 0o600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~current_umask())
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def save_torch(obj: object, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)``; a file system too full for it, or a disk quota used up, raises ``OSError``
    (``ENOSPC``, ``EDQUOT``) naming ``path``.

    torch says only "unexpected pos ..." (a RuntimeError) when a write falls short: it is told apart by asking the
    file system for the tensors' bytes beside ``path`` (``posix_fallocate`` of a temporary file, removed at once),
    which a full disk and a quota both refuse with their own error."""
    import torch  # noqa: PLC0415 -- deferred: this module is imported where torch is not needed

    try:
        torch.save(obj, path)
    except RuntimeError as exc:
        shortage = _space_refused(Path(path), _tensor_bytes(obj))
        if shortage is not None:
            raise OSError(shortage, os.strerror(shortage), os.fspath(path)) from exc
        raise


def _space_refused(path: Path, size: int) -> int | None:
    """The errno (ENOSPC, EDQUOT) with which the file system refuses ``size`` bytes beside ``path``; None if it
    gives them (or cannot be asked)."""
    try:
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".space")
    except OSError as exc:
        return exc.errno if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    try:
        os.posix_fallocate(fd, 0, max(size, 1))
    except OSError as exc:
        return exc.errno if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    return None


def _tensor_bytes(obj: object) -> int:
    """The bytes of the tensors in ``obj`` (nested dicts, lists and tuples)."""
    import torch  # noqa: PLC0415 -- deferred: as above

    if isinstance(obj, torch.Tensor):
        return obj.nelement() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0
