"""The set-up: the three dependency files agree, CI runs the README's command, and
JupyterLab serves the course."""

import json
import re
import urllib.request
from pathlib import Path

import tomllib
from lab import TOKEN, running_lab
from packaging.requirements import Requirement

ROOT = Path(__file__).parents[1]


def lock_pins():
    text = (ROOT / "requirements/lock.txt").read_text()
    return {
        Requirement(line).name.lower(): line
        for line in text.splitlines()
        if line and not line.startswith(("#", "-"))
    }


def pyproject_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    return [Requirement(r) for r in reqs]


def environment_pins():
    text = (ROOT / "environment.yml").read_text()
    return [Requirement(m) for m in re.findall(r"^\s+- ([A-Za-z][\w.\-]*==[^\n]+)$", text, re.M)]


def test_lock_pins_every_declared_package_within_its_range():
    pins = lock_pins()
    for req in pyproject_requirements():
        assert req.name.lower() in pins, f"{req.name} is in pyproject.toml but not in the lock"
        version = re.search(r"==([^\s;]+)", pins[req.name.lower()]).group(1)
        assert req.specifier.contains(version, prereleases=True), f"{req.name}=={version} vs {req}"


def test_environment_yml_names_the_same_packages_and_versions_as_the_lock():
    declared = {r.name.lower() for r in pyproject_requirements()}
    env = environment_pins()
    assert {r.name.lower() for r in env} == declared
    lines = set((ROOT / "requirements/lock.txt").read_text().splitlines())
    for req in env:
        assert any(line.startswith(str(req).split(";")[0].strip()) for line in lines), req


def test_torch_is_the_cpu_build_unless_asked():
    torch_lines = [line for line in lock_pins().values() if line.startswith("torch==")]
    # pip keeps one line per name in the dict; read the file for both platforms' lines
    text = (ROOT / "requirements/lock.txt").read_text()
    assert 'torch==2.13.0+cpu ; sys_platform != "darwin"' in text
    assert torch_lines and "download.pytorch.org/whl/cpu" in (ROOT / "Makefile").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme
    assert re.search(r"^make test$", (ROOT / ".ci/run").read_text(), re.M)


def test_jupyterlab_serves_the_notebooks(tmp_path):
    """`make lab` as a learner runs it (headless), then the contents API lists the course."""
    with running_lab(tmp_path) as base:
        url = f"{base}/api/contents/notebooks?token={TOKEN}"
        listing = json.load(urllib.request.urlopen(url, timeout=5))
        names = {item["name"] for item in listing["content"]}
        assert {"00_start_here.ipynb", "01_attention.ipynb"} <= names
        root = json.load(urllib.request.urlopen(url.replace("/notebooks?", "?"), timeout=5))
        assert {"exercises", "notebooks", "tfcourse"} <= {item["name"] for item in root["content"]}
        page = urllib.request.urlopen(f"{base}/lab?token={TOKEN}", timeout=5)
        assert page.status == 200
