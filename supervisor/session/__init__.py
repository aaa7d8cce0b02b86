"""The session protocol: from a harness's payload to what the hook prints, exactly once.

Owns the payload (``_payload``), source routing and the start of a session (``_routing``,
``_outcome``, ``_starts``), the lock and completion interlock (``_lock``, ``_ledger``), the
ancestry walk (``_ancestry``, ``_procinfo``), gates and scope (``_gates``), the nudge
(``_nudge``, ``_transcript``), nested instructions (``_nested``), changed instructions
refreshed (``_refresh``), the per-event fast path's index files (``_fastpath``) and the off
switch (``_off``).

May import: base, state, adapters, config and engine. Never the bridges or the verbs.
"""
