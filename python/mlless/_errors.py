"""The package's exception for runs that fail."""


class RunError(RuntimeError):
    """A run (or a preparation) that failed; ``run_path`` is its location.

    The run's directory holds what it left: ``spec.json``, ``failure.json`` and, for a
    cancelled run, its checkpoints (``mlless train --resume RUN_PATH`` continues it).
    """

    def __init__(self, message, run_path=None):
        super().__init__(message)
        self.run_path = run_path

    def __reduce__(self):
        return (type(self), (str(self), self.run_path))
