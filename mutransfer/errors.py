"""Error types that the CLI turns into a one-line message and exit code 2."""

from operators.errors import OperatorConfigError


class UserInputError(ValueError):
    """Bad user input (a flag, a file, a study field).

    The message is one line that names the field and how to fix it.
    """


#: Exceptions that the CLI reports as a one-line error with exit code 2.
USER_ERRORS = (UserInputError, OperatorConfigError)
