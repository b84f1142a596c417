"""Where the agent's commands run: a git workspace it cannot subvert, and the sandbox around every command."""
