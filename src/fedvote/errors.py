"""Errors shared across fedvote."""


class ConfigError(ValueError):
    """A bad argument at a public boundary; names the argument and the value found.

    ``argument`` is the parameter's name as the Python API spells it (``num_agents``);
    the CLI prints it as its flag.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument
        self.detail = message
