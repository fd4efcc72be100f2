"""Running the CLI in a subprocess, and the shape every user error must have."""
import os
import subprocess
import sys


def gt(*args, env=None):
    """`python -m gemmtrace ARGS`, with `env` added to this process's environment."""
    return subprocess.run([sys.executable, "-m", "gemmtrace", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def assert_one_sentence_error(out, *needles):
    """Exit 1, stderr one line starting 'error:', no traceback, naming each needle."""
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    err = out.stderr.strip()
    assert err.startswith("error:"), err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
