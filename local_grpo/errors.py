"""The one error type the CLI turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad user input: the message is one line naming the field, flag or file."""
