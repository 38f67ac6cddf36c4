"""The page-store layer, and everything a storage driver may import from oocarr.

The layer's modules (``blocked``, ``locator``, ``regions``, ``pages``,
``dtypes``, ``compression``, ``buffers``, ``views``, ``registry``,
``scratch``) import nothing of oocarr but each other and :mod:`oocarr.errors`.
A driver (built in or third party) imports this package and
:mod:`oocarr.errors`, and nothing else of oocarr.

Examples
--------
>>> from oocarr.store import BlockedArray, Locator
>>> issubclass(BlockedArray, object) and Locator.make("x", "/a").driver
'x'
"""

from .blocked import BlockedArray, corrupt, jsonable_attrs, require_exists, temp_sibling
from .compression import Compression
from .containment import check_within, follow_external_option, follows_external
from .dtypes import BFLOAT16, as_dtype, dtype_token, is_bfloat16
from .locator import Locator, is_local, normalize_container
from .locks import pid_alive
from .pages import DEFAULT_CHUNK_BYTES, DEFAULT_PAGE_BYTES, check_layout, grow_block, region_shape
from .storage_errors import storage_error

__all__ = [
    "BlockedArray",
    "Locator",
    "Compression",
    "BFLOAT16",
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_PAGE_BYTES",
    "as_dtype",
    "check_layout",
    "check_within",
    "corrupt",
    "dtype_token",
    "follow_external_option",
    "follows_external",
    "grow_block",
    "is_bfloat16",
    "is_local",
    "jsonable_attrs",
    "normalize_container",
    "pid_alive",
    "region_shape",
    "require_exists",
    "storage_error",
    "temp_sibling",
]
