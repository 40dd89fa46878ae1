"""Django integration (``pip install 'leafid[django]'``): a model field whose value is the
next id of a leafid tag, from one segment generator per process made on first use.

.. code-block:: python

    # settings.py
    LEAFID = {"url": "postgres://app:secret@db/app", "wait_timeout": 5.0}

    # models.py
    from leafid.django import LeafIdField

    class Order(models.Model):
        id = LeafIdField(tag="order", primary_key=True)

``settings.LEAFID`` holds ``url`` and any keyword argument of
:class:`leafid.SegmentGenerator`. Nothing connects at import or in
``AppConfig.ready()``: the generator is made by the first id a process asks for, so a
gunicorn ``--preload`` master that issues none never holds segments. A process forked
after its parent made the generator goes on with it safely: a segment generator fetches
segments of the child's own after a fork (docs/processes-and-fork.md). Tags are not
created here: create them once, before the first insert (``leafid init``, or
``generator().create_tag(tag, exist_ok=True)`` in a data migration).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, Optional, Tuple

from django.conf import settings
from django.db import models

from . import SegmentGenerator, TagHandle

__all__ = ["LeafIdField", "generator", "next_id"]

_lock = threading.Lock()
_generator: Optional[SegmentGenerator] = None
_handles: Dict[str, TagHandle] = {}


def _new_lock_in_child() -> None:
    # A fork while another thread held the lock (making the generator) would leave the
    # child's copy held forever.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def generator() -> SegmentGenerator:
    """This process's segment generator, made on the first call from ``settings.LEAFID``
    (``{"url": ..., **keyword arguments of SegmentGenerator}``) and kept for the
    process's life."""
    global _generator
    gen = _generator
    if gen is not None:
        return gen
    with _lock:
        if _generator is None:
            options = dict(getattr(settings, "LEAFID", None) or {})
            url = options.pop("url", None)
            if not url:
                raise ValueError(
                    'settings.LEAFID has no "url": set LEAFID = {"url": '
                    '"postgres://user:pass@host/db"} (or mysql://, sqlite://) in settings.py')
            _generator = SegmentGenerator(url, **options)
        return _generator


def next_id(tag: str) -> int:
    """The next id of ``tag`` from this process's generator (see ``generator``); waits
    as ``TagHandle.next_id`` does when none is at hand. A module-level callable, so it
    can also serve as a ``default=`` wrapped in ``functools.partial``."""
    handle = _handles.get(tag)
    if handle is None:
        handle = _handles.setdefault(tag, generator().tag(tag))
    return handle.next_id()


class _NextId:
    """The field's default: the next id of one tag (an object, not a lambda, so a model
    stays picklable)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __call__(self) -> int:
        return next_id(self.tag)


class LeafIdField(models.BigIntegerField):
    """A ``BigIntegerField`` whose default is the next id of ``tag``: set when the model
    is instantiated without a value, so ``save()``, ``objects.create()`` and
    ``bulk_create()`` insert leafid ids, and the id is known before the insert.
    Migrations record the tag, not the default."""

    def __init__(self, *args: Any, tag: str, **kwargs: Any) -> None:
        if "default" in kwargs:
            raise TypeError("LeafIdField takes no default: its default is the next id of its tag")
        self.tag = tag
        super().__init__(*args, default=_NextId(tag), **kwargs)

    def deconstruct(self) -> Tuple[Any, str, Any, Any]:
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("default", None)
        kwargs["tag"] = self.tag
        return name, path, args, kwargs
