"""Django integration (``pip install 'leafid[django]'``): a model field whose value is the
next id of a leafid tag, from one segment generator per process made on first use
(``settings.LEAFID = {"url": ..., **keyword arguments of SegmentGenerator}``)."""

from typing import Any, Tuple

# Typed with django-stubs installed; without it Django is untyped, and a subclass of Any.
from django.db import models  # type: ignore[import-untyped, unused-ignore]

from . import SegmentGenerator

__all__ = ["LeafIdField", "generator", "next_id"]

def generator() -> SegmentGenerator:
    """This process's segment generator, made on the first call from ``settings.LEAFID``
    (``{"url": ..., **keyword arguments of SegmentGenerator}``) and kept for the
    process's life."""

def next_id(tag: str) -> int:
    """The next id of ``tag`` from this process's generator (see ``generator``); waits
    as ``TagHandle.next_id`` does when none is at hand. A module-level callable, so it
    can also serve as a ``default=`` wrapped in ``functools.partial``."""

class LeafIdField(models.BigIntegerField):  # type: ignore[misc, type-arg, unused-ignore]
    """A ``BigIntegerField`` whose default is the next id of ``tag``: set when the model
    is instantiated without a value, so ``save()``, ``objects.create()`` and
    ``bulk_create()`` insert leafid ids, and the id is known before the insert.
    Migrations record the tag, not the default."""

    tag: str
    def __init__(self, *args: Any, tag: str, **kwargs: Any) -> None: ...
    def deconstruct(self) -> Tuple[Any, str, Any, Any]: ...
