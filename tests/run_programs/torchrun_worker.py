"""A torchrun worker for tests/test_run.py: reports what cgfast set up in it (see
report_state.py), with its rank."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from report_state import report

report(sys.argv[1], f"rank{os.environ['RANK']}")
