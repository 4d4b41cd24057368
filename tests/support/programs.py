"""Code tasks with a test program, and test programs that attack the judge: the test-program judge's tests
run them in the test process and in a fresh interpreter."""

import os

from dapo_rllib.tasks.data.code_tasks import CodeTask
from dapo_rllib.tasks.sandbox import SandboxLimits

TIMEOUT_S = 2.0
# Small limits, so that a test program that loops, forks or fills memory meets them in seconds.
LIMITS = SandboxLimits(timeout_s=TIMEOUT_S, cpu_s=2, memory_mb=256)
# A right candidate for the tasks of `program_task`.
ADD = "def add(a, b):\n    return a + b\n"


def program_task(setup: str = "", tests=("assert add(1, 2) == 3",), names=None) -> CodeTask:
    """A code task judged by a test program: `setup`, then the assertions `tests` on the candidate's `add`."""
    program = {"setup": setup, "tests": list(tests)} | ({"names": names} if names else {})
    return CodeTask(({"role": "user", "content": "Write add."},), program, "program", "code", 0)


HOSTILE_TEST_PROGRAMS = {
    "opens the network": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\n",
    "forks without end": "import os\nwhile True:\n    os.fork()\n",
    "fills the disk": "with open('/tmp/fill', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
    "reads the trainer's files": f"open({os.path.abspath(__file__)!r}).read()\n",
    "loops forever": "while True:\n    pass\n",
    "exits without a verdict": "import os\nos._exit(0)\n",
    "writes garbage on the report": "import os\nos.write(3, b'garbage\\n')\n",
}
