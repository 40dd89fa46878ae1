"""The exception hierarchy mirrors the core's Error enum."""

from __future__ import annotations

import leafid
from leafid import _errors, _leafid

# Straight from the core's `Error::NAMES`: a variant added there fails this test until
# `_errors.py` has its class.
CORE_VARIANTS: list[str] = list(_leafid._ERROR_NAMES)


def test_every_core_variant_has_a_class_under_leaf_error() -> None:
    assert len(CORE_VARIANTS) >= 18
    for name in CORE_VARIANTS:
        cls = getattr(leafid, name)
        assert issubclass(cls, leafid.LeafError), name
        assert getattr(_errors, name) is cls
        assert name in leafid.__all__, name


def test_not_found_is_a_key_error_and_config_errors_are_value_errors() -> None:
    assert issubclass(leafid.TagNotFound, KeyError)
    for name in ["InvalidTag", "InvalidUrl", "InvalidConfig", "WorkerIdOutOfRange"]:
        assert issubclass(getattr(leafid, name), ValueError), name
    assert not issubclass(leafid.StoreUnavailable, ValueError)


def test_message_is_printed_as_is() -> None:
    assert str(leafid.TagNotFound('tag "x" not found')) == 'tag "x" not found'


def test_public_names_are_exported() -> None:
    for name in leafid.__all__:
        assert hasattr(leafid, name), name
