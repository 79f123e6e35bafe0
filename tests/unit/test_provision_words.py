"""The words for a failed fetch of Pyodide, from Deno's output (sandbox/provision.py deno_failure)."""

from __future__ import annotations

from sandbox_kernel.sandbox.provision import deno_failure

OFFLINE = """Download http://127.0.0.1:9/pyodide
error: Failed caching npm package 'pyodide@314.0.7'
    0: error sending request for url (http://127.0.0.1:9/pyodide/-/pyodide-314.0.7.tgz): client error (Connect): tcp connect error: Connection refused (os error 111)
    1: client error (Connect)
    2: tcp connect error
    3: Connection refused (os error 111)

Stack backtrace:
   0: <unknown>
"""


def test_a_refused_connection_reads_as_offline_with_the_address_tried():
    assert deno_failure(OFFLINE) == (
        "the npm registry at http://127.0.0.1:9/pyodide/-/pyodide-314.0.7.tgz could not be reached "
        "(Connection refused (os error 111)): this machine seems to be offline"
    )


def test_a_failed_name_lookup_reads_as_offline():
    output = (
        "error: Failed caching npm package 'pyodide@314.0.7'\n"
        "    0: error sending request for url (https://registry.npmjs.org/pyodide): client error (Connect): dns error: "
        "failed to lookup address information: Temporary failure in name resolution\n"
    )
    assert "https://registry.npmjs.org/pyodide could not be reached" in deno_failure(output)


def test_another_error_is_quoted_with_its_deepest_cause():
    output = "error: Integrity check failed for package: 'npm:pyodide@314.0.7'\n    0: checksum mismatch\n"
    assert deno_failure(output) == (
        "Deno said: error: Integrity check failed for package: 'npm:pyodide@314.0.7' (checksum mismatch)"
    )
    assert deno_failure("") == "Deno said: nothing"
