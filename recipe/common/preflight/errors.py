"""The one error every pre-flight check raises: a message naming the option (or file, row) at fault."""


class IBPOSetupError(ValueError):
    """The verl config cannot run IBPO as configured."""
