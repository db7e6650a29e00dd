"""``python -m llmopt``: the ``llmopt`` command."""

import sys

from .cli import main

sys.exit(main())
