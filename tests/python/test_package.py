"""What the installed distribution says about itself."""

from __future__ import annotations

import importlib.metadata

import leafid


def test_version_is_the_distributions_version() -> None:
    # The native module's version (Cargo's) and the wheel's metadata are one number.
    assert leafid.__version__ == importlib.metadata.version("leafid")
    assert leafid.__version__.count(".") == 2
