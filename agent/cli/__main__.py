"""`python -m agent.cli`: the `perfagent` command, as the tests and the red-team lab start it."""

import sys

from agent.cli import main

if __name__ == "__main__":
    sys.exit(main())
