"""Wheel build hook: write the generated harness manifests into the source tree first.

``plugins/gemini/gemini-extension.json`` is generated from the package version
(:mod:`supervisor._manifests`), never committed; the wheel copies ``plugins/`` into
``supervisor/_plugins/plugins`` (pyproject.toml ``force-include``), so it must exist before.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ManifestsHook(BuildHookInterface):  # type: ignore[misc]
    """Runs :func:`supervisor._manifests.write_gemini_extension` for ``plugins/gemini``."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        sys.path.insert(0, str(root))
        try:
            from supervisor._manifests import write_gemini_extension
        finally:
            sys.path.remove(str(root))
        write_gemini_extension(root / "plugins" / "gemini")
