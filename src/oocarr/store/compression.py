"""Compression specs: the one form every driver, ``create`` and the CLI share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oocarr.errors import UnsupportedCompressionError

__all__ = ["Compression", "CompressionSpec", "parse_compression"]


@dataclass(frozen=True)
class Compression:
    """A compressor name and an optional level.

    Examples
    --------
    >>> str(Compression("gzip", 4)), str(Compression("lzf"))
    ('gzip:4', 'lzf')
    """

    name: str
    level: int | None = None

    def __str__(self) -> str:
        return self.name if self.level is None else f"{self.name}:{self.level}"


#: What ``compression=`` takes: ``"gzip"``, ``"gzip:6"``, ``("gzip", 6)``,
#: ``{"name": "gzip", "level": 6}``, a :class:`Compression`, or ``None``/``"none"``.
CompressionSpec = str | tuple[str, int | None] | Mapping[str, Any] | Compression | None


def parse_compression(
    spec: CompressionSpec, supported: Iterable[str], *, url: str | None = None
) -> Compression | None:
    """Parse a compression spec.

    Accepted forms: ``None``, ``"gzip"``, ``"gzip:6"``, ``("gzip", 6)`` and
    ``{"name": "gzip", "level": 6}``.

    Parameters
    ----------
    spec : str, tuple, mapping or None
        The compression asked for.
    supported : iterable of str
        What the destination driver can write.
    url : str, optional
        Named in the error message.

    Raises
    ------
    UnsupportedCompressionError
        When the name is not in ``supported`` or the level is not an integer.

    Examples
    --------
    >>> parse_compression("gzip:6", {"gzip", "lzf"})
    Compression(name='gzip', level=6)
    >>> parse_compression(None, {"gzip"}) is None
    True
    """
    if spec is None or spec == "none":
        return None
    supported = sorted(supported)
    name: Any
    level: Any
    if isinstance(spec, Compression):
        name, level = spec.name, spec.level
    elif isinstance(spec, str):
        name, _, level_text = spec.partition(":")
        level = level_text or None
    elif isinstance(spec, Mapping):
        name, level = spec.get("name"), spec.get("level")
    elif isinstance(spec, (tuple, list)) and len(spec) == 2:
        name, level = spec
    else:
        raise UnsupportedCompressionError(
            f"cannot read compression {spec!r}: write 'gzip' or 'gzip:6'", url=url
        )
    where = f" for {url}" if url else ""
    if name not in supported:
        offered = ", ".join(supported) if supported else "none (store it uncompressed)"
        raise UnsupportedCompressionError(
            f"compression {name!r} is not supported{where}; this format offers: {offered}",
            url=url,
        )
    if level is not None:
        try:
            level = int(level)
        except (TypeError, ValueError):
            raise UnsupportedCompressionError(
                f"compression level {level!r}{where} must be an integer, e.g. '{name}:4'", url=url
            ) from None
    return Compression(str(name), level)
