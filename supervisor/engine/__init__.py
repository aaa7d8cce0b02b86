"""The engine and watchdog: run stages under one budget, kill whole trees, print in order.

Owns running a digest or a command (``_run``; ``supervise run``'s lean path ``_runwait``), one
stage's life (``_stage``, ``_spawn``), the kill sequence and the process-tree watch (``_tree``,
``_cgroup``, ``_proctable``), the timing table, subreaper, children listing and zombie reaper
that the engine and ``_runwait`` share (``_reaper``, stdlib only), the one output choke point (``_output``), the truncation banner
(``_banner``), results (``_results``), stage stderr logs (``_stagelog``), deferred stages and
their detached runner (``_deferred``, ``_deferred_runner``) and signals turned into an abort
(``_signals``).

May import: base, state, adapters and config. Never the session protocol, the bridges or the
verbs: a session calls the engine, the engine never calls back.
"""
