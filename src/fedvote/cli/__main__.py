"""``python -m fedvote.cli``: the ``fedvote`` command."""

import sys

from fedvote.cli.app import main

main(sys.argv[1:])
