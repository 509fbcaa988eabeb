"""The ``jaxrl-async`` command: ``command`` dispatches train, eval, sweep, pbt and halving;
``parsers`` and ``options`` build and read the flags; ``sweep`` and ``population`` parse
the search commands' ranges."""

from jaxrl_async.cli.command import main

__all__ = ["main"]
