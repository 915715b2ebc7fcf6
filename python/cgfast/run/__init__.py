"""``cgfast run -- COMMAND``: cgfast active in every Python process a program starts,
with no edit to the program.

``cgfast run`` starts the command with a directory of its own first on ``PYTHONPATH``
and its settings in ``CGFAST_RUN``. That directory holds a ``sitecustomize`` module,
which Python imports at start-up in every process that inherits the environment: the
program, ``multiprocessing`` children (spawn and forkserver start new interpreters),
``subprocess`` children, torchrun's workers. It starts the process's recording
(:mod:`cgfast.run._process`) and then runs the ``sitecustomize`` it hides, if any.
Children started by fork inherit the parent's recording and forget what it recorded.

Nothing is done until the program imports torch: then every capture is recorded, the
modules of every model called during a capture are named, and profiler exports save the
process's annotations into the run's directory. Inductor's toggle goes on when Inductor
is first imported; the graph node id source is chosen at the first capture.

Limits: ``python -S``, ``-I`` and ``-E`` ignore ``PYTHONPATH`` or ``sitecustomize``, and a
program that resets its children's environment takes them out of the run.
"""
