"""The jupyter_kernel_test conformance suite, run against the real pyodide-sandbox kernel.

The classes are unittest TestCases; pytest still applies the session autouse `kernelspec`
fixture (conftest.py) before their setUpClass starts a kernel by name.
"""

from __future__ import annotations

import jupyter_kernel_test
import pytest

from sandbox_kernel.jupyter.kernelspec import KERNEL_NAME


@pytest.mark.timeout(300)
class SandboxKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "python"
    file_extension = ".py"

    code_hello_world = "print('hello, world')"
    code_stderr = "import sys; print('oops', file=sys.stderr)"

    completion_samples = [  # noqa: RUF012
        {"text": "zi", "matches": {"zip"}},
        {"text": "import math; math.sq", "matches": {"sqrt"}},
        {"text": "import json; json.dum", "matches": {"dump", "dumps"}},
    ]

    complete_code_samples = ["1", "print('hello, world')", "def f(x):\n  return x*2\n\n\n"]  # noqa: RUF012
    incomplete_code_samples = ["print('''hello", "def f(x):\n  x*2", "for i in range(3):"]  # noqa: RUF012
    invalid_code_samples = ["import = 7q", "1)"]  # noqa: RUF012

    code_page_something = "print?"
    code_generate_error = "raise ValueError('boom')"

    code_execute_result = [  # noqa: RUF012
        {"code": "1+2+3", "result": "6"},
        {"code": "[n*n for n in range(1, 4)]", "result": "[1, 4, 9]"},
        {"code": "from IPython.display import HTML\nHTML('<b>x</b>')", "mime": "text/html", "result": "<b>x</b>"},
    ]
    code_display_data = [  # noqa: RUF012
        {"code": "from IPython.display import HTML, display\ndisplay(HTML('<b>test</b>'))", "mime": "text/html"},
        {"code": "from IPython.display import Math, display\ndisplay(Math(r'\\frac{1}{2}'))", "mime": "text/latex"},
        {"code": "from IPython.display import JSON, display\ndisplay(JSON({'a': 1}))", "mime": "application/json"},
    ]

    code_history_pattern = "1?2*"  # glob, as IPython's history search: matches "1+2+3"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "zip"
    code_clear_output = "from IPython.display import clear_output\nprint('x')\nclear_output()"


@pytest.mark.timeout(120)
class SandboxIopubWelcomeTests(jupyter_kernel_test.IopubWelcomeTests):
    kernel_name = KERNEL_NAME
    support_iopub_welcome = True
