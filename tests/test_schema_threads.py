"""The first schema compiles of a process, in many threads at once."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import threading

sys.setswitchinterval(1e-6)
from nrllm_core._schema import argument_error, compile_schema

THREADS = 32
barrier = threading.Barrier(THREADS)
errors = []


def first_use(index):
    barrier.wait()
    try:
        schema = {"type": "object", "properties": {"q": {"type": "array"}}}
        validator = compile_schema(schema)
        assert argument_error(validator, {"q": 1}) == "$.q: 1 is not of type 'array'"
    except BaseException as error:
        errors.append(repr(error))


threads = [threading.Thread(target=first_use, args=(i,)) for i in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(errors[:1])
sys.exit(1 if errors else 0)
"""


def test_the_first_compiles_in_many_threads_at_once_all_succeed():
    # Each attempt is a fresh interpreter, where jsonschema is not imported yet.
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
