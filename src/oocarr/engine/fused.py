"""Fused arrays: a chain of elementwise ops over stored arrays, computed tile by tile on read.

Under ``jax.jit`` an elementwise op on stored arrays writes nothing: its
output is a :class:`FusedArray`, an array whose locator (driver ``"fused"``)
holds the expression (the ops' classes, nested) and its leaves: the stored
arrays' locators, small constants, and *slots* for in-memory values only
known when the compiled function runs (a traced weight, a cotangent).  The
op that consumes it (a reduction, a matmul, another fused op, a write at the
end of the jitted call) reads its tiles like any stored array's; each read
reads the leaves' matching regions and evaluates the whole chain in one
jitted function, so ``oocarr.sum(((a - b) * 2) ** 2)`` streams ``a`` and
``b`` once and no intermediate reaches storage.

A slot's values live in this process (:func:`deposit`), held while the
primitive that made them lives; :attr:`FusedArray.portable_locator` puts
them into the locator itself for a task sent to another process.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import itertools
import json
import math
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.errors import InvalidArgumentError, OocarrError, ReadOnlyError
from oocarr.store.blocked import BlockedArray
from oocarr.store.buffers import BufferPool
from oocarr.store.compression import Compression
from oocarr.store.dtypes import as_dtype, dtype_token
from oocarr.store.locator import Locator
from oocarr.store.registry import get_driver

from .compile import BlockFunction
from .fused_layout import computed_elements, layout, op_class

__all__ = [
    "FusedArray",
    "Leaf",
    "deferred_locator",
    "deposit",
    "expression",
    "forget",
    "fused_locator",
    "is_deferred",
    "is_fused",
    "leaf_constant",
    "program_of",
    "register",
    "resolve",
    "short_name",
]

DRIVER = "fused"

#: Most elements of an in-memory operand written into the locator as a constant; a larger one
#: is a slot (its values handed over when the jitted function runs).
CONST_ELEMS = 64

_SLOTS: dict[str, tuple[np.ndarray, ...]] = {}
#: Guards the slots and the deferred cotangents' versions (callbacks run in XLA's threads).
_LOCK = threading.Lock()


def deposit(token: str, values: Sequence[Any]) -> None:
    """Hold ``values`` as the slots ``token`` names (each call of a jitted function replaces
    the previous call's).

    Examples
    --------
    >>> deposit("example", [np.ones(2)])
    >>> forget("example")
    """
    held = tuple(np.asarray(v) for v in values)
    with _LOCK:
        _SLOTS[token] = held


def forget(token: str) -> None:
    """Drop the slots ``token`` names (the primitive that filled them is gone)."""
    with _LOCK:
        _SLOTS.pop(token, None)


def _slot_values(token: str) -> tuple[np.ndarray, ...]:
    with _LOCK:
        try:
            return _SLOTS[token]
        except KeyError:
            raise OocarrError(
                "a fused oocarr array outlived the in-memory values it was computed from; "
                "write it to storage inside the jitted function (oocarr.save) to keep it"
            ) from None


DEFERRED = "deferred"

#: Versions of each deferred cotangent kept: a jitted call registers one per contribution
#: and reads each before its backward pass ends.
KEEP_VERSIONS = 64

_DEFERRED: dict[str, collections.OrderedDict[int, Locator]] = {}
_VERSIONS = itertools.count(1)


def deferred_locator(primal: Locator, shape: Sequence[int], dtype: Any) -> Locator:
    """The type-level locator of the cotangent of the fused array at ``primal``: what it holds
    is registered when the backward pass runs (:func:`register`), one version per value.

    Examples
    --------
    >>> from oocarr.ops.elementwise import UNARY
    >>> a = Leaf.stored(Locator.make("memmap", "/a.npy"), (4,))
    >>> deferred_locator(fused_locator(UNARY["exp"], [a], (4,), "f4"), (4,), "f4").driver
    'deferred'
    """
    digest = hashlib.sha256(primal.to_json().encode()).hexdigest()[:24]
    options = {"shape": list(shape), "dtype": dtype_token(dtype)}
    return Locator.make(DEFERRED, digest, "", None, options)


def is_deferred(locator: Locator) -> bool:
    """Whether ``locator`` is a :func:`deferred_locator`."""
    return locator.driver == DEFERRED


def register(locator: Locator, value: Locator) -> np.ndarray:
    """Record that a new value of the deferred cotangent at ``locator`` is the array at
    ``value`` (a fused array, or a scratch array a backward pass wrote); returns its version,
    the marker the value travels as.

    Examples
    --------
    >>> loc = Locator.make(DEFERRED, "example", "", None, {"shape": [2], "dtype": "<f4"})
    >>> version = register(loc, Locator.make("memmap", "/g.npy"))
    >>> resolve(loc, version).url
    '/g.npy'
    """
    version = next(_VERSIONS) % 2**24 or next(_VERSIONS)  # exact in a float32 marker, not 0
    with _LOCK:
        versions = _DEFERRED.setdefault(locator.url, collections.OrderedDict())
        versions[version] = value
        while len(versions) > KEEP_VERSIONS:
            versions.popitem(last=False)
    return np.asarray(version, np.float32)


def resolve(locator: Locator, version: Any) -> Locator:
    """The array that version ``version`` (a marker) of the deferred cotangent at ``locator``
    is; version 0 (no contribution registered) is zeros."""
    version = int(np.asarray(version))
    if version == 0:
        options = locator.driver_kwargs
        zero = Leaf.const(np.zeros((), as_dtype(options["dtype"]))).spec
        url = json.dumps({"expr": {"leaf": 0}, "leaves": [zero]}, sort_keys=True)
        return Locator.make(DRIVER, url, "", None, options)
    with _LOCK:
        try:
            return _DEFERRED[locator.url][version]
        except KeyError:
            raise OocarrError(
                "a gradient of a fused oocarr array was read after its jitted call had "
                "replaced it; differentiate once per call"
            ) from None


def is_fused(locator: Locator) -> bool:
    """Whether ``locator`` addresses a :class:`FusedArray`.

    Examples
    --------
    >>> is_fused(Locator.make("memmap", "/a.npy"))
    False
    """
    return locator.driver == DRIVER


def short_name(locator: Locator) -> str:
    """A fused array's name in messages and jaxprs: ``fused:`` and its last op.

    Examples
    --------
    >>> from oocarr.ops.elementwise import UNARY
    >>> a = Leaf.stored(Locator.make("memmap", "/a.npy"), (4,))
    >>> short_name(fused_locator(UNARY["exp"], [a], (4,), "f4"))
    'fused:exp'
    """
    op = _spec_of(locator)["expr"].get("op", ":zeros")
    return f"{DRIVER}:{op.rpartition(':')[2].lower()}"


class Leaf:
    """One leaf of a fused expression, as :func:`fused_locator` takes it.

    Build with :meth:`stored`, :meth:`const` or :meth:`slot`.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    @classmethod
    def stored(cls, locator: Locator, shape: Sequence[int]) -> Leaf:
        """A stored array (a fused one is inlined into the new expression)."""
        return cls({"locator": locator.to_dict(), "shape": list(shape)})

    @staticmethod
    def fits_locator(value: Any, aval: Any) -> bool:
        """Whether an in-memory operand is a constant of the locator (a concrete, small,
        real value) rather than a slot."""
        if isinstance(value, jax.core.Tracer) or math.prod(aval.shape) > CONST_ELEMS:
            return False
        return np.dtype(aval.dtype).kind != "c"  # JSON has no complex numbers

    @classmethod
    def const(cls, value: Any) -> Leaf:
        """A small in-memory value written into the locator."""
        value = np.asarray(value)
        return cls(
            {
                "const": value.astype(np.float64).tolist()
                if value.dtype.kind == "V"
                else value.tolist(),
                "dtype": dtype_token(value.dtype),
                "shape": list(value.shape),
            }
        )

    @classmethod
    def slot(cls, token: str, index: int, shape: Sequence[int], dtype: Any) -> Leaf:
        """Value ``index`` of the slots ``token`` names, held by :func:`deposit` at run time."""
        return cls(
            {
                "slot": token,
                "index": index,
                "shape": list(shape),
                "dtype": dtype_token(dtype),
            }
        )


def _spec_of(locator: Locator) -> dict[str, Any]:
    try:
        spec = json.loads(locator.url)
        spec["expr"], spec["leaves"]  # noqa: B018 - both must be there
        return spec
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidArgumentError(f"not a fused array's locator: {locator} ({err})") from None


def fused_locator(
    op_class: type,
    leaves: Sequence[Leaf],
    shape: Sequence[int],
    dtype: Any,
    vjp: int | None = None,
    node: dict[str, Any] | None = None,
) -> Locator:
    """The locator of ``op_class`` applied to ``leaves``: a fused array of ``shape``, ``dtype``.

    A stored leaf that is itself fused is inlined (its expression and leaves
    merged), so a chain is one expression evaluated in one function; equal
    leaves are read once.  With ``vjp=i``, the array is the cotangent of the
    op's input ``i``: the last leaf is the output's cotangent, the others the
    op's inputs.  ``node`` is what the op's node holds besides (its
    :meth:`~oocarr.engine.op.Op.fused_node`: a row-local op's ``lead`` and ``params``).

    Examples
    --------
    >>> from oocarr.ops.elementwise import BINARY
    >>> a = Leaf.stored(Locator.make("memmap", "/a.npy"), (4,))
    >>> loc = fused_locator(BINARY["multiply"], [a, Leaf.const(np.float32(2))], (4,), "f4")
    >>> loc.driver, json.loads(loc.url)["expr"]["op"]
    ('fused', 'oocarr.ops.elementwise:Multiply')
    """
    merged: list[dict[str, Any]] = []

    def leaf_index(spec: dict[str, Any]) -> int:
        if spec not in merged:
            merged.append(spec)
        return merged.index(spec)

    def renumber(node: dict[str, Any], mapping: list[int]) -> dict[str, Any]:
        if "leaf" in node:
            return {"leaf": mapping[node["leaf"]]}
        return {**node, "args": [renumber(a, mapping) for a in node["args"]]}

    args = []
    for leaf in leaves:
        spec = leaf.spec
        if "locator" in spec and spec["locator"]["driver"] == DRIVER:
            inner = _spec_of(Locator.from_dict(spec["locator"]))
            mapping = [leaf_index(s) for s in inner["leaves"]]
            args.append(renumber(inner["expr"], mapping))
        else:
            args.append({"leaf": leaf_index(spec)})
    path = f"{op_class.__module__}:{op_class.__qualname__}"
    expr = {**(node or {}), "op": path, "args": args, "shape": list(shape)}
    if vjp is not None:
        expr["vjp"] = vjp
    url = json.dumps({"expr": expr, "leaves": merged}, sort_keys=True)
    return Locator.make(DRIVER, url, "", None, {"shape": list(shape), "dtype": dtype_token(dtype)})


def _inlined(leaf: dict[str, Any]) -> bool:
    """Whether a leaf is a scalar constant, written into the fused array's function (larger
    constants are read by region, as stored leaves are)."""
    return "const" in leaf and not leaf["shape"]


def program_of(spec: dict[str, Any]) -> str:
    """What a fused array's function depends on: its expression and its scalar constants
    (written into the function, so ``x ** 2`` multiplies as JAX's ``x ** 2`` does; see
    :func:`expression` for the floating ones), as JSON text."""
    consts = {str(i): leaf for i, leaf in enumerate(spec["leaves"]) if _inlined(leaf)}
    program = {"expr": spec["expr"], "consts": consts, "leaves": len(spec["leaves"])}
    return json.dumps(program, sort_keys=True)


def leaf_constant(leaf: dict[str, Any]) -> np.ndarray:
    # a NumPy array of the leaf's dtype, as the unfused op reads it: a Python int would be
    # weakly typed (``int8_array + np.int32(5)`` computed in int8); a 0-d integer is still a
    # concrete exponent, so ``x ** 2`` multiplies (``lax.integer_pow``) as JAX's does
    return np.asarray(leaf["const"]).astype(as_dtype(leaf["dtype"]))


@functools.lru_cache(maxsize=256)
def expression(program_json: str, cuts_json: str = "null") -> Any:
    """The function of the non-constant leaves' blocks that evaluates the whole expression
    (what :meth:`FusedArray.leaves_read` gives consumers), slicing each leaf use and each
    row-local node's result by ``cuts_json`` (:func:`~oocarr.engine.fused_layout.layout`'s
    cuts as JSON; ``"null"``: none).

    Examples
    --------
    >>> from oocarr.ops.elementwise import UNARY
    >>> a = Leaf.stored(Locator.make("memmap", "/a.npy"), (2,))
    >>> program = program_of(json.loads(fused_locator(UNARY["square"], [a], (2,), "f4").url))
    >>> expression(program)(np.array([2.0, 3.0])).tolist()
    [4.0, 9.0]
    """
    program = json.loads(program_json)
    consts = {int(i): leaf_constant(leaf) for i, leaf in program["consts"].items()}
    # XLA's simplifier folds a floating constant into the op that uses it with identities
    # IEEE arithmetic does not have (``x + 0.0`` is ``x``, wrong for ``x = -0.0``); behind an
    # optimization barrier the constant is still compiled in but applied as a value is, as
    # in the unfused op. Integer constants are not held back (exact; an exponent: ``x ** 2``).
    inexact = {i for i, c in consts.items() if jnp.issubdtype(c.dtype, jnp.inexact)}
    cut_list = json.loads(cuts_json)

    def evaluate(*given: Any) -> Any:
        cuts = iter(cut_list or ())

        def cut(value: Any) -> Any:
            slices = next(cuts) if cut_list else None
            if slices is None or not jnp.ndim(value):
                return value
            return value[tuple(slice(a, b) for a, b in slices)]

        blocks = iter(given)
        leaves = [
            (jax.lax.optimization_barrier(consts[i]) if i in inexact else consts[i])
            if i in consts
            else next(blocks)
            for i in range(program["leaves"])
        ]

        # a value used twice (``z`` in ``softplus(z) - y * z``) is one subtree inlined twice:
        # computed once (an MLP's ``z`` was computed twice a tile, 1.4x the time), unless cuts
        # may slice its uses differently
        seen: dict[str, Any] = {}

        def value(node: dict[str, Any]) -> Any:
            if cut_list or "leaf" in node:
                return evaluated(node)
            key = json.dumps(node, sort_keys=True)
            if key not in seen:
                seen[key] = evaluated(node)
            return seen[key]

        def evaluated(node: dict[str, Any]) -> Any:
            if "leaf" in node:
                return cut(leaves[node["leaf"]])
            cls = op_class(node["op"])
            fn = functools.partial(cls.fn, **_params(node))
            args = [value(a) for a in node["args"]]
            if "vjp" not in node:
                out = fn(*args)
                return cut(out) if getattr(cls, "row_local", False) else out
            i, primals, ct = node["vjp"], args[:-1], args[-1]

            def of_input(x: Any) -> Any:
                return fn(*primals[:i], x, *primals[i + 1 :])

            out, pull = jax.vjp(of_input, primals[i])
            return pull(jnp.broadcast_to(jnp.asarray(ct, out.dtype), out.shape))[0]

        return value(program["expr"])

    return evaluate


def _params(node: dict[str, Any]) -> dict[str, Any]:
    """A node's ``params`` as its ``fn`` takes them (JSON's lists of axes as tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in node.get("params", {}).items()}


@functools.lru_cache(maxsize=256)
def _compiled(program_json: str, cuts_json: str = "null") -> Any:
    """:func:`expression`, compiled for the engine's device."""
    return BlockFunction(expression(program_json, cuts_json))


class FusedArray(BlockedArray):
    """A read-only array computed on read: an elementwise expression over stored leaves."""

    name = DRIVER
    suffixes = ()
    supports_out_buffer = True
    atomic_create = False
    supports_attrs = False
    supports_chunks = False

    def __init__(self, locator: Locator, spec: dict[str, Any]) -> None:
        options = locator.driver_kwargs
        shape = tuple(options["shape"])
        self._spec = spec
        self._leaf_shapes = [tuple(s["shape"]) for s in spec["leaves"]]
        self._constant = [_inlined(s) for s in spec["leaves"]]
        self._stores: list[BlockedArray | None] = []
        self._values: list[Any] = []
        try:
            for leaf in spec["leaves"]:
                self._stores.append(None)
                self._values.append(None)
                if "locator" in leaf:
                    loc = Locator.from_dict(leaf["locator"])
                    self._stores[-1] = get_driver(loc.driver).open(loc, "r")
                elif "slot" in leaf:
                    self._values[-1] = _slot_values(leaf["slot"])[leaf["index"]]
                else:
                    self._values[-1] = leaf_constant(leaf)
        except BaseException:
            self._release()
            raise
        chunks = next(
            (
                s.chunks
                for s in self._stores
                if s is not None and tuple(s.shape) == shape and s.chunks is not None
            ),
            None,
        )
        self._program = program_of(spec)
        self._fn = _compiled(self._program)
        self._pool = BufferPool(keep=2 * len(self._stores))
        super().__init__(locator, shape, as_dtype(options["dtype"]), chunks, mode="r")

    @property
    def spec(self) -> dict[str, Any]:
        """The expression and its leaves, as the locator holds them."""
        return self._spec

    @classmethod
    def can_open(cls, container: str, inner: str, storage_options: Any) -> bool:
        return False

    @classmethod
    def _open(cls, locator: Locator, mode: str) -> FusedArray:
        if mode != "r":
            raise ReadOnlyError(
                "a fused array is computed from other arrays and cannot be written; "
                "oocarr.save it to storage first",
                url=locator.full_url,
            )
        return cls(locator, _spec_of(locator))

    @classmethod
    def _create(
        cls,
        locator: Locator,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None,
        compression: Compression | None,
        attrs: dict[str, Any],
        overwrite: bool,
    ) -> NoReturn:
        raise InvalidArgumentError(
            "a fused array cannot be created; it is the result of elementwise ops",
            url=locator.full_url,
        )

    @classmethod
    def exists(cls, locator: Locator) -> bool:
        for leaf in _spec_of(locator)["leaves"]:
            if "locator" in leaf:
                loc = Locator.from_dict(leaf["locator"])
                if not get_driver(loc.driver).exists(loc):
                    return False
        return True

    @classmethod
    def delete(cls, locator: Locator) -> None:
        """A fused array holds no storage of its own; its leaves are never deleted."""

    @property
    def url(self) -> str:
        """A short name for messages (the locator itself holds the whole expression)."""
        return short_name(self.locator)

    @property
    def portable_locator(self) -> Locator:
        """This array's locator with its slots' values written in as constants, so that a
        task holding it reopens it in another process."""
        spec = json.loads(self.locator.url)
        for i, leaf in enumerate(spec["leaves"]):
            if "slot" in leaf:
                value = np.asarray(self._values[i])
                value = value.astype(as_dtype(leaf["dtype"]))
                spec["leaves"][i] = Leaf.const(value).spec
        url = json.dumps(spec, sort_keys=True)
        return Locator.make(DRIVER, url, "", None, self.locator.driver_kwargs)

    def _leaf_regions(self, region: tuple[slice, ...]) -> list[tuple[slice, ...]]:
        return layout(self._spec, region)[0]

    def _compute(self, region: tuple[slice, ...]) -> np.ndarray:
        blocks = []
        regions, cuts = layout(self._spec, region)
        fn = self._fn if cuts is None else _compiled(self._program, json.dumps(cuts))
        for store, value, constant, leaf_region in zip(
            self._stores, self._values, self._constant, regions
        ):
            if constant:
                continue
            if store is not None:
                blocks.append(store.read_view(leaf_region, self._pool.empty))
            elif isinstance(value, np.ndarray) and value.ndim:
                blocks.append(value[leaf_region])
            else:
                blocks.append(value)
        result = np.asarray(fn(*blocks))
        shape = tuple(r.stop - r.start for r in region)
        if result.dtype != self.dtype:
            result = result.astype(self.dtype)
        if result.shape != shape:
            result = np.ascontiguousarray(np.broadcast_to(result, shape))
        return result

    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        out[...] = self._compute(region)

    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        result = self._compute(region)
        result.flags.writeable = False
        return result

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:  # pragma: no cover
        # _open refuses "r+"
        raise ReadOnlyError("a fused array cannot be written", url=self.url)

    def _read_attrs(self) -> dict[str, Any]:
        return {}

    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        raise ReadOnlyError("a fused array has no attributes to write", url=self.url)

    def _flush(self) -> None:
        pass

    def _release(self) -> None:
        for store in self._stores:
            if store is not None:
                store.close()

    @property
    def compression(self) -> str | None:
        return None

    def _leaf_tiles(self, shape: Sequence[int]) -> list[tuple[BlockedArray, tuple[int, ...]]]:
        region = tuple(slice(0, n) for n in shape)
        return [
            (store, tuple(r.stop - r.start for r in leaf_region))
            for store, leaf_region in zip(self._stores, self._leaf_regions(region))
            if store is not None
        ]

    def leaves_read(self) -> tuple[str, list[tuple[int, ...]], list[Any]]:
        """What a consumer needs to evaluate this array inside its own block function:
        :func:`expression`'s program, and the shape and holder (a store, or an in-memory
        array) of each leaf read by region, in the program's argument order (scalar
        constants are in the program itself).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> from oocarr.ops.elementwise import BINARY
        >>> x = oocarr.from_numpy(np.ones(4, "f4"))
        >>> leaves = [Leaf.stored(x.locator, (4,)), Leaf.const(np.float32(2))]
        >>> with FusedArray._open(fused_locator(BINARY["add"], leaves, (4,), "f4"), "r") as f:
        ...     program, shapes, holders = f.leaves_read()
        >>> shapes, expression(program)(np.ones(4, "f4")).tolist()
        ([(4,)], [3.0, 3.0, 3.0, 3.0])
        """
        read = [i for i, constant in enumerate(self._constant) if not constant]
        holders = [
            self._stores[i] if self._stores[i] is not None else self._values[i] for i in read
        ]
        return self._program, [self._leaf_shapes[i] for i in read], holders

    def read_overhead(self, shape: Sequence[int]) -> int:
        """The leaves' blocks and their drivers' buffers, and one block-sized temporary of
        the evaluation (a leaf block XLA copies to align it)."""
        leaves = sum(
            math.prod(s) * store.dtype.itemsize + store.read_overhead(s)
            for store, s in self._leaf_tiles(shape)
        )
        # a row-local node (``x @ w``) computes whole rows of its result, however narrow the
        # tile: counted at the array's itemsize
        region = tuple(slice(0, n) for n in shape)
        computed = computed_elements(self._spec, region) * self.dtype.itemsize
        return leaves + computed + math.prod(shape) * self.dtype.itemsize

    def read_threads(self, shape: Sequence[int]) -> int:
        return max((store.read_threads(s) for store, s in self._leaf_tiles(shape)), default=0)

    def read_bytes(self, shape: Sequence[int]) -> int:
        """Bytes a read of a region of ``shape`` reads from storage: the leaves' blocks."""
        return sum(store.read_bytes(s) for store, s in self._leaf_tiles(shape))


# Not a storage driver: the registry resolves the "fused" locators to FusedArray by name
# ("oocarr.engine.fused:FusedArray", see ``registry.register_array_kind``), importing this
# module only when one is reopened, so a fresh process reopens them without importing it first.
