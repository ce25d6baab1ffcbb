"""The built wheel carries the runtime-config pages' words: a module run from it renders both pages.

``tailreactor.config_docs`` reads knobs.toml, runtime-config.toml and templates/ with
importlib.resources; an editable install finds them in the checkout whatever pyproject.toml says,
so this builds the real wheel (setuptools, no network) and renders from it with ``python -S``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile

from wheels import ROOT, build_wheel

DATA = (
    "tailreactor/knobs.toml",
    "tailreactor/runtime-config.toml",
    "tailreactor/templates/runtime-config.en.md",
    "tailreactor/templates/runtime-config.ko.md",
)


def test_the_wheel_ships_the_knob_prose_and_the_templates(tmp_path):
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        assert set(DATA) <= set(z.namelist())
        z.extractall(tmp_path / "site")
    # -S: no site-packages, so not the editable install; config_docs needs only the standard library.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from tailreactor import config_docs as c; "
        "assert c.__file__.startswith(sys.argv[1]), c.__file__; "
        "sys.stdout.write(c.render('en') + c.render('ko'))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(tmp_path / "site")],
        check=True,
        capture_output=True,
        text=True,
        encoding="utf-8",
        cwd=tmp_path,
    )
    assert done.stdout == (ROOT / "docs/en/runtime-config.md").read_text(encoding="utf-8") + (
        ROOT / "docs/ko/runtime-config.md"
    ).read_text(encoding="utf-8")
