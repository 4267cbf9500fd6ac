"""Error type for invalid operator configurations."""


class OperatorConfigError(ValueError):
    """A model or parametrization was configured with values it cannot use.

    The message is one line that names the offending argument and the fix.
    """
