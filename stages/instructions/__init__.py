"""Built-in stage ``instructions`` (its program is ``__main__.py``): the instruction files.

Helpers: ``files`` (reading an instruction file safely), ``discover`` (which files a harness
loads natively), ``imports`` (``@path`` imports).
"""
