"""Built-in stage ``repo`` (its program is ``__main__.py``): the repository's state.

Helper: ``status`` (the stage's body: git's answers and the lines made of them).
"""
