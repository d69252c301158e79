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


class VoteRejected(ValueError):
    """An agent's vote failed validation at the agent boundary; it was not summed.

    Prints as one line naming the agent: ``agent 7: vote row 3 sums to 1.5 > bound 1``.
    """

    def __init__(self, agent_id: int, message: str) -> None:
        super().__init__(f"agent {agent_id}: {message}")
        self.agent_id = agent_id
        self.detail = message
