"""``DiskArray``: a stored array that is also a JAX value, and its hijax type.

Under ``jax.jit`` and ``jax.grad`` a ``DiskArray`` travels as its type,
:class:`DiskArrayType`, which carries the array's shape, dtype and
locator; its only traced (lowered) value is a scalar *marker*.  Ops run
their tiled loops inside ``io_callback``s that take the markers of their
inputs and return the marker of their output, so XLA orders the
callbacks by their data dependencies while the data itself stays in
storage.  A call outside any transformation runs the loop directly.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax._src import core as jax_core
from jax.experimental.hijax import HiType, ShapedArray, register_hitype

from oocarr.engine.fused import deferred_locator, is_deferred, is_fused, short_name
from oocarr.store import registry
from oocarr.store.blocked import BlockedArray
from oocarr.store.dtypes import dtype_name
from oocarr.store.locator import Locator
from oocarr.store.locks import WriterLock
from oocarr.store.scratch import release, scratch_locator
from oocarr.store.views import view_locator

if TYPE_CHECKING:
    from types import ModuleType

    from typing_extensions import TypeIs

    Axis = int | tuple[int, ...] | None

__all__ = [
    "DiskArray",
    "DiskArrayType",
    "MARKER_DTYPE",
    "grad_locator",
    "is_disk",
    "lifetime_of",
    "allow_writes",
    "is_writable",
    "register_vspace",
    "add_methods",
    "AnyArray",
    "ArrayLike",
    "DTypeLike",
    "Result",
    "Shape",
    "ShapeLike",
]

#: dtype of the scalar marker a DiskArray lowers to under tracing.
MARKER_DTYPE = np.dtype("float32")


_WRITABLE: set[Locator] = set()


def allow_writes(locator: Locator) -> None:
    """Record that the user opened or created ``locator`` for writing (so ``update_`` may)."""
    _WRITABLE.add(locator)


def is_writable(locator: Locator) -> bool:
    """Whether ``update_`` may overwrite the array at ``locator``."""
    return locator in _WRITABLE


def _delete_owned(driver: type[BlockedArray], locator: Locator) -> None:
    try:
        driver.delete(locator)
    except OSError:
        pass
    release(locator)


class _Lifetime:
    """Deletes an owned array's storage when the last of its holders (the ``DiskArray``, its
    store and the store's page views) is garbage collected."""

    def __init__(self, driver: type[BlockedArray], locator: Locator) -> None:
        weakref.finalize(self, _delete_owned, driver, locator)
        self.dependents: set[Locator] = set()
        self._holders: dict[int, weakref.ref] = {}

    def hold(self, handle: DiskArray) -> None:
        """Note that ``handle`` keeps this array alive (see :meth:`holders`)."""
        self._holders[id(handle)] = weakref.ref(handle)

    def holders(self) -> list[DiskArray]:
        """The live handles keeping this array alive: handles on the same storage, views of
        it, gradients tied to it (an assignment asks whether any other than its own sees
        the storage it would write)."""
        live = {key: ref for key, ref in self._holders.items() if ref() is not None}
        self._holders = live
        return [h for h in (ref() for ref in live.values()) if h is not None]

    def also_delete(self, locator: Locator) -> None:
        """Delete the array at ``locator`` with this one (an eager gradient of an owned array)."""
        if locator not in self.dependents:
            self.dependents.add(locator)
            weakref.finalize(self, _delete_owned, registry.get_driver(locator.driver), locator)


#: The lifetime of each owned array that has a live handle, so that every handle on the same
#: storage (``update`` returns a new one; a jitted step raises new ones) keeps it alive.
_LIFETIMES: weakref.WeakValueDictionary[Locator, _Lifetime] = weakref.WeakValueDictionary()


def lifetime_of(locator: Locator) -> _Lifetime | None:
    """The lifetime of the owned array at ``locator`` while any handle on it is alive."""
    return _LIFETIMES.get(locator)


#: The writer lock held for each array opened for writing while any handle on it is alive:
#: ``update`` returns a new handle, and the lock must outlive the one the user opened.
_WRITERS: weakref.WeakValueDictionary[Locator, WriterLock] = weakref.WeakValueDictionary()


def _writer_of(store: BlockedArray) -> WriterLock | None:
    """A hold of its own on ``store``'s writer lock (``None`` when it has none), so that
    closing the store (which ``update`` does) leaves the array locked for its handles."""
    lock = getattr(store, "_writer_lock", None)
    if lock is None or not lock.held:
        return _WRITERS.get(store.locator) if not store.readonly else None
    held = lock.share()
    _WRITERS[store.locator] = held
    return held


#: ``zero(aval)`` and ``add(aval, x, y)`` of gradient types; they run ops, so the module that
#: builds ops (:mod:`~oocarr.jaxlayer.make_op`) registers them when it is imported.
_VSPACE: dict[str, Callable[..., Any]] = {}


def register_vspace(
    zero: Callable[..., Any],
    add: Callable[..., Any],
    materialize: Callable[..., Any] | None = None,
) -> None:
    """Set how a :class:`DiskArrayType` makes a zero gradient and adds two gradients.

    ``zero(aval)`` returns a ``DiskArray`` of zeros at ``aval``'s locator;
    ``add(aval, x, y)`` writes ``x + y`` there; ``materialize(aval, marker)``
    writes a fused array that a jitted function returns to scratch storage.
    :mod:`oocarr.jaxlayer.make_op` registers its :func:`~oocarr.jaxlayer.make_op.zeros_at`,
    :func:`~oocarr.jaxlayer.make_op.add_into` and ``materialize_fused`` when it
    is imported, which importing :mod:`oocarr.jaxlayer` does.

    Examples
    --------
    >>> from oocarr.jaxlayer.make_op import add_into, zeros_at
    >>> register_vspace(zeros_at, add_into)  # what importing make_op did already
    """
    _VSPACE["zero"] = zero
    _VSPACE["add"] = add
    if materialize is not None:
        _VSPACE["materialize"] = materialize


def _vspace(name: str) -> Callable[..., Any]:
    try:
        return _VSPACE[name]
    except KeyError:
        raise RuntimeError(
            "DiskArray gradients need oocarr.jaxlayer.make_op; import oocarr.jaxlayer"
        ) from None


def grad_locator(locator: Locator, shape: Any = None, dtype: Any = None) -> Locator:
    """Where the gradient of the array at ``locator`` is written: a scratch array whose name is
    derived from the locator, so a jitted training step compiles once.

    Examples
    --------
    >>> loc = Locator.make("hdf5", "/data/a.h5", "/x")
    >>> grad_locator(loc) == grad_locator(loc), grad_locator(loc).driver
    (True, 'memmap')
    """
    digest = hashlib.sha256(locator.to_json().encode()).hexdigest()[:24]
    return scratch_locator(f"grad-{digest}", shape, dtype)


@dataclass(frozen=True)
class DiskArrayType(HiType):
    """The hijax type of a :class:`DiskArray`: shape, dtype and locator.

    A gradient's type is the *tangent* type of its primal: same shape and
    dtype, at :func:`grad_locator` of the primal's locator.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    locator: Locator
    tangent: bool = False

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def str_short(self, short_dtypes: bool = False, mesh_axis_types: bool = False, **_: Any) -> str:
        where = short_name(self.locator) if is_fused(self.locator) else self.locator.full_url
        return f"DiskArray[{dtype_name(self.dtype)}{list(self.shape)} @ {where}]"

    # lowering: a DiskArray is one scalar marker in the lojax program
    def lo_ty(self) -> list[jax_core.AbstractValue]:
        return [ShapedArray((), MARKER_DTYPE)]

    def lower_val(self, hi_val: DiskArray) -> list[Any]:
        marker = hi_val._marker
        return [jnp.zeros((), MARKER_DTYPE) if marker is None else marker]

    def raise_val(self, marker: Any) -> DiskArray:
        computed = is_fused(self.locator) or is_deferred(self.locator)
        if computed and not isinstance(marker, jax_core.Tracer):
            # a fused array leaving a jitted call: its leaves may change or go away after it
            return _vspace("materialize")(self, marker)
        return DiskArray._at(self.locator, self.shape, self.dtype, marker, tangent=self.tangent)

    # autodiff
    def to_tangent_aval(self) -> DiskArrayType:
        if self.tangent:
            return self
        if is_fused(self.locator):  # a fused intermediate's cotangent is fused too
            where = deferred_locator(self.locator, self.shape, self.dtype)
        else:
            where = grad_locator(self.locator, self.shape, self.dtype)
        return DiskArrayType(self.shape, self.dtype, where, True)

    def vspace_zero(self) -> DiskArray:
        return _vspace("zero")(self)

    def vspace_add(self, x: Any, y: Any) -> DiskArray:
        return _vspace("add")(self, x, y)

    def normalize(self) -> DiskArrayType:
        return self


def is_disk(x: object) -> TypeIs[DiskArray]:
    """True for a ``DiskArray`` or a tracer whose type is :class:`DiskArrayType`."""
    if isinstance(x, DiskArray):
        return True
    return isinstance(x, jax_core.Tracer) and isinstance(jax_core.typeof(x), DiskArrayType)


class DiskArray:
    """An array that lives in storage and behaves as a JAX value.

    Made by :func:`oocarr.open`, :func:`oocarr.create`, :func:`oocarr.from_numpy`,
    :func:`oocarr.save` and by oocarr ops, never directly.  ``np.asarray(x)``
    reads it whole; ``x.store`` is the page store for region and block I/O.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(6.0).reshape(2, 3))
    >>> x.shape, x.dtype, np.asarray(x)[1, 2]
    ((2, 3), dtype('float64'), np.float64(5.0))
    """

    __array_priority__ = 100
    #: What a fused array's handle keeps alive: the fused call holding its slots (make_op).
    _fused_by: Any

    if TYPE_CHECKING:
        # What oocarr.api installs when oocarr is imported (api.elementwise.install_operators
        # and the modules' install_methods), as a type checker sees it; == and != are
        # elementwise too (left as object's here: their types could not differ from it).
        T: DiskArray
        mT: DiskArray  # noqa: N815 (the Array API's name)
        device: Any

        def __add__(self, other: ArrayLike, /) -> DiskArray: ...
        def __radd__(self, other: ArrayLike, /) -> DiskArray: ...
        def __sub__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rsub__(self, other: ArrayLike, /) -> DiskArray: ...
        def __mul__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rmul__(self, other: ArrayLike, /) -> DiskArray: ...
        def __truediv__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rtruediv__(self, other: ArrayLike, /) -> DiskArray: ...
        def __matmul__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rmatmul__(self, other: ArrayLike, /) -> DiskArray: ...
        def __pow__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rpow__(self, other: ArrayLike, /) -> DiskArray: ...
        def __floordiv__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rfloordiv__(self, other: ArrayLike, /) -> DiskArray: ...
        def __mod__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rmod__(self, other: ArrayLike, /) -> DiskArray: ...
        def __and__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rand__(self, other: ArrayLike, /) -> DiskArray: ...
        def __or__(self, other: ArrayLike, /) -> DiskArray: ...
        def __ror__(self, other: ArrayLike, /) -> DiskArray: ...
        def __xor__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rxor__(self, other: ArrayLike, /) -> DiskArray: ...
        def __lshift__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rlshift__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rshift__(self, other: ArrayLike, /) -> DiskArray: ...
        def __rrshift__(self, other: ArrayLike, /) -> DiskArray: ...
        def __gt__(self, other: ArrayLike, /) -> DiskArray: ...
        def __ge__(self, other: ArrayLike, /) -> DiskArray: ...
        def __lt__(self, other: ArrayLike, /) -> DiskArray: ...
        def __le__(self, other: ArrayLike, /) -> DiskArray: ...
        def __divmod__(self, other: ArrayLike, /) -> tuple[DiskArray, DiskArray]: ...
        def __rdivmod__(self, other: ArrayLike, /) -> tuple[DiskArray, DiskArray]: ...
        def __neg__(self) -> DiskArray: ...
        def __pos__(self) -> DiskArray: ...
        def __abs__(self) -> DiskArray: ...
        def __invert__(self) -> DiskArray: ...
        def __bool__(self) -> bool: ...
        def __int__(self) -> int: ...
        def __float__(self) -> float: ...
        def __complex__(self) -> complex: ...
        def __index__(self) -> int: ...
        def __setitem__(self, key: Any, value: ArrayLike, /) -> None: ...
        def sum(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def mean(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def max(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def min(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def any(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def all(self, axis: Axis = None, keepdims: bool = False) -> Result: ...
        def prod(
            self, *, axis: Axis = None, dtype: DTypeLike | None = None, keepdims: bool = False
        ) -> Result: ...
        def var(
            self, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
        ) -> Result: ...
        def std(
            self, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
        ) -> Result: ...
        def argmax(self, *, axis: int | None = None, keepdims: bool = False) -> Result: ...
        def argmin(self, *, axis: int | None = None, keepdims: bool = False) -> Result: ...
        def astype(
            self, dtype: DTypeLike, /, *, copy: bool = True, device: Any = None
        ) -> DiskArray: ...
        def transpose(self, axes: tuple[int, ...] | None = None) -> DiskArray: ...
        def reshape(self, *shape: Any, copy: bool | None = None) -> DiskArray: ...
        def squeeze(self, axis: int | tuple[int, ...] | None = None) -> DiskArray: ...
        def update_(self, new: ArrayLike) -> DiskArray: ...
        def to_device(self, device: Any, /, *, stream: Any = None) -> DiskArray: ...
        def __array_namespace__(self, /, *, api_version: str | None = None) -> ModuleType: ...

    def __init__(self, store: BlockedArray, *, owned: bool = False) -> None:
        self._store: BlockedArray | None = store
        self._locator = store.locator
        self._shape = store.shape
        self._dtype = store.dtype
        self._marker: Any = None
        self._tangent = False
        self._finalizer = _LIFETIMES.get(store.locator)
        self._writer = _writer_of(store)
        if not store.readonly:
            allow_writes(store.locator)
        if owned or self._finalizer is not None:
            self._own()

    @classmethod
    def _at(
        cls,
        locator: Locator,
        shape: tuple[int, ...],
        dtype: Any,
        marker: Any = None,
        *,
        tangent: bool = False,
    ) -> DiskArray:
        """A handle on the array at ``locator``, opened on first use."""
        self = object.__new__(cls)
        self._tangent = tangent
        self._store = None
        self._locator = locator
        self._shape = tuple(shape)
        self._dtype = np.dtype(dtype)
        self._marker = marker
        self._finalizer = _LIFETIMES.get(locator)
        self._writer = _WRITERS.get(locator)
        return self

    def _own(self) -> DiskArray:
        """Delete the storage once every handle on it (and their stores) is garbage collected."""
        lifetime = _LIFETIMES.get(self._locator)
        if lifetime is None:
            lifetime = _Lifetime(registry.get_driver(self._locator.driver), self._locator)
            _LIFETIMES[self._locator] = lifetime
        self._finalizer = lifetime
        if self._store is not None:
            self._store.__dict__["_lifetime"] = lifetime
        return self

    def _tied_to(self, primal: Any) -> DiskArray:
        """When ``primal`` owns its storage, delete this array (its gradient) with it, and keep
        it alive while this one is: eager gradients of intermediates then do not pile up."""
        lifetime = getattr(primal, "_finalizer", None)
        if isinstance(primal, DiskArray) and lifetime is not None:
            lifetime.also_delete(self._locator)
            self._finalizer = lifetime
        return self

    @property
    def _finalizer(self) -> _Lifetime | None:
        """The lifetime of the owned storage this handle keeps alive (``None``: none)."""
        return self.__dict__.get("_lifetime")

    @_finalizer.setter
    def _finalizer(self, lifetime: _Lifetime | None) -> None:
        self.__dict__["_lifetime"] = lifetime
        if lifetime is not None:
            lifetime.hold(self)

    def _rebind(self, locator: Locator) -> None:
        """Make this handle the owner of the committed scratch array at ``locator`` (a copy an
        assignment wrote): handles and views made before keep the storage they had."""
        old = self._store
        self._store = None
        self._locator = locator
        self._marker = None
        self._tangent = False
        self._finalizer = None
        self._own()
        if old is not None:
            old.close()  # this handle's own; other handles opened theirs

    @property
    def aval(self) -> DiskArrayType:
        """This array's hijax type."""
        return DiskArrayType(self._shape, self._dtype, self._locator, self._tangent)

    def _wait(self) -> None:
        """Wait until the computation that writes this array (a jitted call's callback) is done."""
        marker = self._marker
        if marker is not None and not isinstance(marker, jax_core.Tracer):
            jax.block_until_ready(marker)

    @property
    def store(self) -> BlockedArray:
        """The :class:`~oocarr.store.blocked.BlockedArray` holding the data."""
        self._wait()
        if self._store is None:
            self._store = registry.get_driver(self._locator.driver).open(self._locator, "r")
            if self._finalizer is not None:
                self._store.__dict__["_lifetime"] = self._finalizer
        return self._store

    @property
    def locator(self) -> Locator:
        """The address that reopens this array in any process."""
        return self._locator

    @property
    def url(self) -> str:
        """``container#/inner`` form of the locator."""
        return self._locator.full_url

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Logical size in bytes."""
        return self.size * self._dtype.itemsize

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """The storage's chunk shape (``None``: contiguous)."""
        return self.store.chunks

    @property
    def attrs(self) -> dict[str, Any]:
        """A copy of the stored attributes."""
        return self.store.attrs

    def info(self) -> dict[str, Any]:
        """The store's JSON-able description (see :meth:`BlockedArray.info`)."""
        return self.store.info()

    def close(self) -> None:
        """Commit a created array, release its handles and let other processes write it.

        Examples
        --------
        >>> import tempfile, os, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
        >>> x = oocarr.create(path, (2,), "f4")
        >>> x.close()
        >>> oocarr.open(path, mode="r+").close()  # another writer may open it now
        """
        if self._store is not None:
            self._store.close()
        self._release_writer()

    def _release_writer(self) -> None:
        for lock in (getattr(self._store, "_writer_lock", None), self._writer):
            if lock is not None:
                lock.release()

    def __enter__(self) -> DiskArray:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._store is not None:
            self._store.__exit__(exc_type, exc, tb)
        self._release_writer()

    def __getitem__(self, key: Any) -> DiskArray:
        """A view of a region (integers and unit-step slices), sharing the storage.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> x = oocarr.from_numpy(np.arange(12.0).reshape(3, 4))
        >>> v = x[1:, 2]
        >>> v.shape, np.asarray(v)
        ((2,), array([ 6., 10.]))
        """
        locator = view_locator(self._locator, self._shape, key)
        store = registry.get_driver("view").open(locator, self.store.mode)
        view = DiskArray(store)
        view._finalizer = self._finalizer  # the base's storage lives as long as its views
        if self._finalizer is not None:
            store.__dict__["_lifetime"] = self._finalizer
        return view

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.store.__array__(dtype)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __repr__(self) -> str:
        return f"DiskArray({self.url!r}, shape={self.shape}, dtype={dtype_name(self.dtype)})"


register_hitype(DiskArray, lambda x: x.aval)

# -- the types of the public signatures (re-exported by oocarr.api.types and oocarr) --------
#: An op's operand: a stored array, an in-memory array, or a scalar.
ArrayLike: TypeAlias = (
    DiskArray | jax.Array | np.ndarray | np.generic | bool | int | float | complex
)
#: An array operand: a stored, JAX or NumPy array (an op that reads its shape first).
AnyArray: TypeAlias = DiskArray | jax.Array | np.ndarray
#: What a dtype argument takes: a ``np.dtype``, a type (``np.float32``) or a name (``"f4"``).
DTypeLike: TypeAlias = npt.DTypeLike
#: An array's shape.
Shape: TypeAlias = tuple[int, ...]
#: A shape argument: one length or a sequence of them.
ShapeLike: TypeAlias = int | Sequence[int]
#: An op's result: a ``DiskArray`` in scratch storage, or a ``jax.Array`` (0-d results, and
#: traced values under ``jax.jit``/``jax.grad``).
Result: TypeAlias = DiskArray | jax.Array


def add_methods(methods: dict[str, Callable[..., Any]]) -> None:
    """Give ``DiskArray`` and its traced type (through ``jax_core.aval_method``) each of
    ``methods``, called with the array first.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> add_methods({"first": lambda x: x[0]})
    >>> float(oocarr.from_numpy(np.array([3.0, 4.0])).first())
    3.0
    """
    for name, method in methods.items():
        setattr(DiskArray, name, method)
        setattr(DiskArrayType, name, jax_core.aval_method(method))
