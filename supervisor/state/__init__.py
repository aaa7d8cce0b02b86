"""State: the one door for files under the state dir, and the records kept there.

Owns the state dir's door (``_statedir``: no link followed, capped reads, corrupt files set
aside), the typed records (``_records``), delivery staging (``_delivery``: recorded only
after delivery), exposure metrics (``_exposure``), the project and its state dir location
(``_project``) and the file primitives every writer shares (``_fsutil``).

May import: the base modules (``supervisor._errors``, ``_exitcodes``, ``_version``,
``_sanitize``) and the standard library. Nothing above it: every other room stores through it.
"""
