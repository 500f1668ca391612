"""Whether an optional library is installed, asked without importing it: the registrations and
the integration happen only where their library is there."""
import importlib.util
import sys

__all__ = ['installed']


def installed(package: str) -> bool:
    """Whether ``package`` can be imported (a finder that refuses it counts as not installed).

    Example::

        >>> installed('torch')
        True
    """
    if package in sys.modules:
        return True
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False
