"""``python -m aios_rl.cli``: the same as the ``aios-rl`` command."""

from . import main

main()
