"""The one error every pre-flight check raises: a message naming the option (or file, row) at fault."""


class SetupError(ValueError):
    """The verl config cannot run its method as configured."""
