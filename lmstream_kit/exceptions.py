"""Exceptions raised by lmstream_kit.

Every error a user can cause derives from :class:`KitError`; the CLI prints
its message on one line and exits with status 2 instead of showing a
traceback.  Messages name the offending value.
"""


class KitError(Exception):
    """Raised for any user-facing error in lmstream_kit (the root class)."""


class ConfigError(KitError, ValueError):
    """Raised when a parameter, option or name has an invalid value."""


class UnknownNameError(ConfigError, KeyError):
    """Raised when a registry lookup names something that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SpoolError(KitError):
    """Raised when a feed spool cannot be created, written or read."""


class IngestError(KitError):
    """Raised when a directory-ingest adapter cannot read its input directory."""


class JavaNotFoundError(KitError):
    """Raised when no Java runtime is available to start Spark."""


class EngineError(KitError):
    """Raised when the Spark engine fails to start, run or stop a stream."""


class ChannelError(KitError):
    """Raised when the source cannot reach the driver's admission channel."""


class SpecError(KitError):
    """Raised when a Flumina spec breaks one of its laws (the message holds the counterexample)."""


def one_line(error: "BaseException | str") -> str:
    """The first line of an error's message (its type name when the message is empty).

    >>> one_line(ValueError("bad value 3\\n  at line 7")), one_line(KeyError())
    ('bad value 3', 'KeyError')
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def error_line(error: BaseException) -> str:
    """The Python error a remote task raised (the last ``XxxError: ...`` line of the message, as
    Spark passes a worker's traceback on), else ``Type: first line``.

    >>> error_line(RuntimeError("An exception was thrown from the Python worker.\\nTraceback ...\\n"
    ...                         "  File 'x.py', line 3\\nValueError: no conversion for speed -3\\n"))
    'ValueError: no conversion for speed -3'
    >>> error_line(KeyError("total"))
    "KeyError: 'total'"
    """
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.split(":", 1)[0].endswith(("Error", "Exception")) and not ln.startswith(("org.", "java.")):
            return ln
    return f"{type(error).__name__}: {one_line(error)}"
