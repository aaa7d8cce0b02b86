"""Built-in stage ``memory`` (its program is ``__main__.py``): the memory store's recap.

Helpers: ``common`` (the stage environment, options, logging; also used by ``summary``),
``store`` (the store's files), ``handoff`` (the handoff note, delivered once) and
``consolidate`` (the detached consolidation command).
"""
