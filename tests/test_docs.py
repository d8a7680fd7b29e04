"""The README is a short front door to docs/, and its facts that can drift are read from the code.

Every docs page is linked from the README, every relative link in the README and docs/ leads to
a file (and an anchor to a heading), and the deployments, commands and make targets the README
names are the ones deployments/prefect.yaml, the `judgeflow` app and the Makefile declare.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer.main
import yaml

from flows.cli import app
from flows.commands import common

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text a reader sees as prose: code fences and HTML comments left out."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _visible(text: str) -> str:
    """What a reader sees, code blocks included; only HTML comments left out."""
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as '-', repeats -1, -2."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(path.read_text()).splitlines():
        heading = re.match(r"^#{1,6} +(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


def _make_targets(text: str) -> set[str]:
    """`make X` in inline code, and `make X` lines in code blocks (not the verb in prose)."""
    code = "\n".join(re.findall(r"^```.*?^```", text, flags=re.DOTALL | re.MULTILINE))
    return set(re.findall(r"`make ([a-z][\w-]*)", text)
               + re.findall(r"^\s*make ([a-z][\w-]*)", code, flags=re.MULTILINE))


def _deployments() -> list[str]:
    config = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())
    return [deployment["name"] for deployment in config["deployments"]]


def test_every_docs_page_is_linked_from_the_readme_s_reference_table():
    reference = _section(README.read_text(), "Reference")
    linked = {(README.parent / target.split("#")[0]).resolve()
              for target in LINK.findall(reference)}
    unlinked = [page.name for page in DOCS if page.resolve() not in linked]
    assert not unlinked, f"docs pages the README's reference table does not link: {unlinked}"


def test_every_relative_link_leads_to_a_file_and_an_anchor_to_a_heading():
    broken = []
    for page in PAGES:
        for target in _relative_links(page):
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.is_file():
                broken.append(f"{page.relative_to(REPO)}: {target!r} (no such file)")
            elif anchor and (linked.suffix != ".md" or anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(REPO)}: {target!r} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_reads_in_minutes():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert len(text.encode()) <= 25_000
    # Benchmark logs and commit hashes belong in docs/performance.md.
    hashes = [word for word in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"\d", word) and re.search(r"[a-f]", word)]
    assert not hashes, f"commit hashes in the README: {hashes}"
    widest = max(line.count("|") - 1 for line in text.splitlines() if line.startswith("|"))
    assert widest <= 3, f"a table of {widest} columns in the README: put it in docs/"


def test_the_deployments_the_readme_states_are_those_prefect_yaml_declares():
    declared = _deployments()
    readme = README.read_text()
    stated = re.search(r"`deployments/prefect\.yaml` declares (\w+) deployments \(([^)]*)\)",
                       readme.replace("\n", " "))
    assert stated, "the README no longer says how many deployments prefect.yaml declares"
    assert NUMBERS.get(stated.group(1), stated.group(1)) == len(declared)
    assert re.findall(r"`([^`]+)`", stated.group(2)) == declared
    # The deployments page says the same, and gives a row to each.
    page = (REPO / "docs" / "deployments.md").read_text()
    count = re.search(r"`deployments/prefect\.yaml` defines (\w+) deployments", page)
    assert NUMBERS.get(count.group(1), count.group(1)) == len(declared)
    rows = re.findall(r"^\| `[^/`]+/([^`]+)` \|", page, re.MULTILINE)
    assert rows == declared


def test_the_commands_the_readme_lists_are_the_cli_commands():
    commands = set(typer.main.get_command(app).commands)
    assert len(commands) >= 10
    for page, heading in [(README, "Commands"), (REPO / "docs" / "cli.md", "The commands")]:
        listed = re.findall(r"^\| `judgeflow ([a-z-]+)` \|",
                            _section(page.read_text(), heading), re.MULTILINE)
        assert len(listed) == len(set(listed)), f"{page.name}: a command listed twice"
        assert set(listed) == commands, f"{page.name}: {sorted(listed)} != {sorted(commands)}"


def test_every_make_target_the_docs_name_exists():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.MULTILINE))
    for page in PAGES:
        named = _make_targets(_visible(page.read_text()))
        assert named <= targets, f"{page.name} names make targets not in the Makefile: " \
            f"{named - targets}"
    assert {"demo", "test"} <= _make_targets(README.read_text())


def test_the_readme_s_server_steps_are_the_deployments_page_s():
    # The browser test runs the README's lines; the full page must say the same.
    def steps(text: str) -> list[str]:
        section = text[text.index("**1. Start a server**"):text.index("**2. Create the work pool")]
        line = r"^ {4}(export PREFECT_API_URL=\S+|\.venv/bin/prefect server start[^#\n]*)"
        return re.findall(line, section, re.MULTILINE)

    readme = steps(README.read_text())
    assert len(readme) == 2
    assert readme == steps((REPO / "docs" / "deployments.md").read_text())


def _synopsis(text: str, command: str) -> set[str]:
    """The options a usage block names: the `judgeflow COMMAND DATA` line and the indented ones."""
    block = re.search(rf"^judgeflow {command} DATA.*\n(?: {{4}}.*\n)*", text, re.MULTILINE)
    assert block, f"no usage block for judgeflow {command}"
    return set(re.findall(r"--[a-z][a-z-]*", block.group(0)))


def test_each_usage_block_names_every_option_of_its_command():
    commands = typer.main.get_command(app).commands
    for command, page in [("evaluate", "cli.md"), ("regression", "regression.md")]:
        options = {option for param in commands[command].params for option in param.opts
                   if option.startswith("--")}
        named = _synopsis((REPO / "docs" / page).read_text(), command)
        assert named == options, (f"docs/{page}: judgeflow {command}'s usage lacks "
                                  f"{sorted(options - named)} and names {sorted(named - options)}")


def test_the_readme_s_nightly_time_and_exit_codes_are_the_code_s():
    readme = README.read_text().replace("\n", " ")
    config = yaml.safe_load((REPO / "deployments" / "prefect.yaml").read_text())
    nightly = next(d for d in config["deployments"] if d["name"] == "nightly-regression")
    schedule = nightly["schedules"][0]
    minute, hour = schedule["cron"].split()[:2]
    assert f"`nightly-regression` runs at {int(hour):02d}:{int(minute):02d} " \
           f"{schedule['timezone']}" in readme
    stated = dict(re.findall(r"(\d) (complete|failed|invalid|incomplete|published but not)",
                             readme.split("Exit codes:")[1][:300]))
    assert stated == {"0": "complete", str(common.EXIT_FAILED): "failed",
                      str(common.EXIT_INVALID): "invalid",
                      str(common.EXIT_INCOMPLETE): "incomplete",
                      str(common.EXIT_NOT_LOGGED): "published but not"}
