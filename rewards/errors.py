"""The error raised for a bad reward spec (unknown name or parameter, missing file or function, syntax error)."""


class RewardSpecError(ValueError):
    """A reward spec cannot be loaded; the message is one line naming the spec and what would be valid."""
