"""``mlless function``: the entry every local function of a run starts with.

The local invoker runs each worker, supervisor and map task as ``python -c`` importing this
module (``mlless._runtime`` sets it up), with the invocation's payload on standard input.
"""

from . import _native


def main():
    """Runs the invocation on standard input; the process's exit status."""
    return _native.function_main()
