"""Run a goldens script inside the pinned reference venv (.venv/goldens), creating it if needed.

Every script in scripts/goldens calls ensure() first. The venv is rebuilt whenever
requirements.txt changes (its sha256 is kept in the venv as a stamp). Nothing else is installed:
pip installs exactly the pinned, hashed wheels.
"""

import hashlib
import os
import subprocess
import sys
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(ROOT, ".venv", "goldens")
REQUIREMENTS = os.path.join(HERE, "requirements.txt")
STAMP = os.path.join(VENV, "requirements.sha256")


def _python():
    return os.path.join(VENV, "bin", "python")


def _want_stamp():
    with open(REQUIREMENTS, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _have_stamp():
    try:
        with open(STAMP) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def ensure():
    """Re-executes the calling script under the venv's interpreter unless already there."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV) and _have_stamp() == _want_stamp():
        return
    if _have_stamp() != _want_stamp():
        print(f"goldens: creating {os.path.relpath(VENV, ROOT)}", file=sys.stderr)
        venv.EnvBuilder(clear=True, with_pip=True).create(VENV)
        subprocess.run(
            [_python(), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--require-hashes", "--no-deps", "-r", REQUIREMENTS],
            check=True,
        )
        with open(STAMP, "w") as f:
            f.write(_want_stamp() + "\n")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1",
               TRANSFORMERS_NO_ADVISORY_WARNINGS="1", HF_HUB_OFFLINE="1")
    os.execve(_python(), [_python()] + sys.argv, env)
