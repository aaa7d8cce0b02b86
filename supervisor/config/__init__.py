"""Configuration: what a digest runs.

Owns the config file's pydantic models and their loading (``_schema``), the validated plan the
engine runs (``_plan``: frozen records, no pydantic), the plan cache that keeps pydantic off
the hook's hot path (``_plancache``), the built-in stage registry (``_builtins``) and the
session context every stage receives (``_context``) and the bounds on the numbers a user
gives (``_limits``). Data flows ``_plancache -> _schema -> _plan -> _limits``, never back.

May import: base, state and ``supervisor.adapters`` (harness names). Never the engine, the
session protocol, the bridges or the verbs.
"""
