"""``python -m jaxrl_async.cli``: the ``jaxrl-async`` command."""

import sys

from jaxrl_async.cli.command import main

sys.exit(main())
