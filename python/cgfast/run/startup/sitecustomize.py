"""Put first on ``PYTHONPATH`` by ``cgfast run``: Python imports this at start-up in every
process of the program. It starts the process's recording, then runs the
``sitecustomize`` that this one hides, if there is one further down ``sys.path``."""

import os
import sys


def _start_recording() -> None:
    try:
        try:
            from cgfast.run._process import start
        except ImportError:
            # an interpreter without cgfast installed: the run's own copy
            _import_cgfast_from(os.environ["CGFAST_RUN_PACKAGE"])
            from cgfast.run._process import start
        start()
    except Exception as exc:
        print(
            f"cgfast run: warning: starting recording failed ({type(exc).__name__}: {exc}); "
            "this process runs on unannotated",
            file=sys.stderr,
        )


def _import_cgfast_from(package: str) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cgfast", os.path.join(package, "__init__.py"), submodule_search_locations=[package]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no cgfast package in {package}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["cgfast"] = module
    spec.loader.exec_module(module)


def _run_the_hidden_sitecustomize() -> None:
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_start_recording()
_run_the_hidden_sitecustomize()
