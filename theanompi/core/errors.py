"""Exception types. Launchers turn :class:`ConfigError` into one line and exit code 2."""


class TheanoMPIError(Exception):
    """Base class of every error theanompi raises on purpose."""


class ConfigError(TheanoMPIError, ValueError):
    """Bad user input: cfg file, devices, options, model file or class.

    Example
    -------
    >>> raise ConfigError("BSP_SYNC_TYPE='foo' is not allowed; use one of: cdd, avg")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: BSP_SYNC_TYPE='foo' is not allowed; use one of: cdd, avg
    """


class ContractError(ConfigError):
    """A ModelClass or DataClass does not satisfy the contract (see README)."""


class NonFiniteError(TheanoMPIError):
    """NaN or Inf in a buffer about to be exchanged; the message names the rank and parameter."""


class SessionError(TheanoMPIError):
    """A running session failed; the message names the rank."""
