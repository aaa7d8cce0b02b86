"""Does Gemini CLI trust the project folder, so that it loads the project's ``.gemini/settings.json``?

Gemini CLI 0.61.0 (``checkPathTrust`` in its bundle) decides in this order: the environment
(``GEMINI_CLI_TRUST_WORKSPACE=false`` or ``GEMINI_RESTRICTED_MODE=true``: not trusted;
``GEMINI_CLI_TRUST_WORKSPACE=true``: trusted); folder trust turned off
(``security.folderTrust.enabled``, default true, in ``~/.gemini/settings.json``): trusted; else the
longest rule of ``~/.gemini/trustedFolders.json`` (``GEMINI_CLI_TRUSTED_FOLDERS_PATH`` overrides;
``{"/abs/path": "TRUST_FOLDER" | "TRUST_PARENT" | "DO_NOT_TRUST"}``, ``TRUST_PARENT`` covering
the rule's parent) whose folder holds the project. With no rule, a headless ``gemini -p`` refuses
to start (exit status 55) and ``--skip-trust`` starts without the project's settings: no hook runs.
``~/.gemini`` is Gemini's user folder (``$GEMINI_CLI_HOME/.gemini`` when that is set: the
harness table's :meth:`~supervisor._harnesses.Harness.user_folder`). An IDE's trust is not
visible from here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_MAX_FILE = 1 << 20
"""Bytes read at most from a Gemini settings or trusted-folders file."""


def _load(path: Path) -> Any:
    """The JSON in ``path`` (``//`` comment lines allowed, as Gemini strips them); None when
    missing. Raises ValueError (one line) when unreadable or not JSON."""
    from .._errors import ConfigError
    from ..state._fsutil import read_small_file

    try:
        data = read_small_file(path, _MAX_FILE, what="a Gemini settings file", missing_ok=True)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    if data is None:
        return None
    text = "\n".join(line for line in data.decode("utf-8", "replace").splitlines()
                     if not line.lstrip().startswith("//"))
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def gemini_trust(project: Path, env: dict[str, str] | None = None,
                 home: Path | None = None) -> tuple[str, str, str]:
    """Whether Gemini CLI trusts ``project`` for its project settings (and so our hooks).

    Args:
        project: the project root (absolute).
        env: the environment to judge (default ``os.environ``).
        home: the home folder (default: the one Gemini's user folder is in, ``GEMINI_CLI_HOME``
            of ``env`` when set, else :func:`supervisor._home.home_dir`; with neither, a
            ``warn`` and nothing read).

    Returns:
        ``(status, text, fix)`` for one doctor line: ``ok`` with how it is trusted, ``FAIL``
        with the reason and the fix, or ``warn`` when a Gemini file cannot be read.
    """
    env = dict(os.environ) if env is None else env
    from .._harnesses import BY_NAME
    from .._home import home_dir

    found = BY_NAME["gemini"].user_folder(home_dir() if home is None else str(home),
                                          env if home is None else {})
    if found is None:  # never ./~/.gemini in the working directory
        return ("warn", "Gemini's folder trust not checked: no home directory (HOME unset, "
                "empty or relative)", "set HOME")
    user = Path(found)
    fix = (f"trust the folder when `gemini` asks in {project}, or turn folder trust off "
           f"(\"security\": {{\"folderTrust\": {{\"enabled\": false}}}} in "
           f"{user / 'settings.json'}); a headless run can set "
           "GEMINI_CLI_TRUST_WORKSPACE=true")
    if env.get("GEMINI_RESTRICTED_MODE") == "true" or env.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return ("FAIL", "this environment makes Gemini distrust every folder (GEMINI_RESTRICTED_MODE"
                "=true or GEMINI_CLI_TRUST_WORKSPACE=false), so it does not load .gemini/settings.json",
                "unset it for Gemini sessions")
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return ("ok", "the folder is trusted by GEMINI_CLI_TRUST_WORKSPACE=true in this "
                "environment (a session started without it is not)", "")
    settings_path = user / "settings.json"
    try:
        settings = _load(settings_path)
    except ValueError as err:
        return ("warn", f"cannot tell whether Gemini trusts this folder: {err}", "")
    security = settings.get("security") if isinstance(settings, dict) else None
    folder_trust = security.get("folderTrust") if isinstance(security, dict) else None
    if isinstance(folder_trust, dict) and folder_trust.get("enabled") is False:
        return ("ok", f"folder trust is off in {settings_path}: project settings load", "")
    rules_path = Path(env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or user / "trustedFolders.json")
    try:
        rules = _load(rules_path)
    except ValueError as err:
        return ("FAIL", f"Gemini cannot read its trusted folders, so it does not start: {err}",
                f"fix or remove {rules_path}")
    best, level = -1, None
    target = os.path.realpath(project)
    for rule, value in (rules.items() if isinstance(rules, dict) else ()):
        if value not in ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST"):
            continue
        if not isinstance(rule, str) or not os.path.isabs(rule):
            continue  # Gemini ignores a relative rule; never resolved against doctor's cwd
        folder = os.path.realpath(os.path.dirname(rule) if value == "TRUST_PARENT" else rule)
        if (target == folder or target.startswith(folder.rstrip("/") + "/")) and len(rule) > best:
            best, level = len(rule), value
    if level == "DO_NOT_TRUST":
        return ("FAIL", f"{project} is marked DO_NOT_TRUST in {rules_path}, so Gemini does not "
                "load .gemini/settings.json", f"change that rule in {rules_path}, or " + fix)
    if level is not None:
        return ("ok", f"the folder is trusted in {rules_path} ({level})", "")
    return ("FAIL", f"{project} is not trusted by Gemini CLI (no rule in {rules_path}), so it does "
            "not load .gemini/settings.json: a headless `gemini -p` refuses to start, "
            "`--skip-trust` starts without our hooks", fix)
