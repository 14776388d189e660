"""`apid new-plugin`: a ready plugin distribution, written from the template beside this module.

The template (`template/`) is a whole plugin: a pyproject with both entry points, a controller
with create/show/list/update/delete over a table of its own, its IO State file, its migrations
package (the first revision is generated from `store.py` by the command, `apid.cli.documents`),
a README and tests that run it through `apid.testing`. Its files end in `.tmpl`, so
that nothing here imports or collects them; their paths and texts name the plugin's parts as
`string.Template` placeholders, filled in from the two names given.
"""

from __future__ import annotations

import datetime
import keyword
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from apid.plugin_host.migrations import BRANCH_NAME

CONTROLLER_NAME = re.compile(r"[a-z][a-z0-9_]*")  # an IO State NAME that is also a module name
# A name said with a vowel first takes "an": a vowel letter, but not the "you" of unit or user,
# nor the "w" of one ("a unit", "an update", "an item", "a one_time").
VOWEL_SOUND = re.compile(r"(?!u[^aeiou][aeiou]|eu|one)[aeiou]")
SUFFIX = ".tmpl"


class ScaffoldRefused(Exception):
    """The names or the target folder cannot make a plugin; the message says why."""


@dataclass(frozen=True)
class PluginNames:
    """Every name the template uses, derived from the plugin's and the controller's."""

    branch: str  # the plugin's name: its migrations branch, alembic_version_<branch>
    controller: str

    @classmethod
    def of(cls, plugin: str, controller: str | None = None) -> PluginNames:
        controller = controller or plugin
        if not BRANCH_NAME.fullmatch(plugin) or plugin == "apid" or keyword.iskeyword(plugin):
            raise ScaffoldRefused(
                f"plugin name {plugin!r}: use 1 to 47 lower-case letters, digits or _, "
                "starting with a letter (it names the package apid_<name> and the migrations)"
            )
        if not CONTROLLER_NAME.fullmatch(controller) or keyword.iskeyword(controller):
            raise ScaffoldRefused(
                f"controller name {controller!r}: use lower-case letters, digits or _, "
                "starting with a letter (it is the URL segment and a module name)"
            )
        return cls(branch=plugin, controller=controller)

    @property
    def distribution(self) -> str:
        return "apid-" + self.branch.replace("_", "-")

    @property
    def package(self) -> str:
        return "apid_" + self.branch

    @property
    def table(self) -> str:
        return self.branch if self.controller == self.branch else f"{self.branch}_{self.controller}"

    def placeholders(self) -> dict[str, str]:
        return {
            "branch": self.branch,
            "controller": self.controller,
            "a_controller": f"{'an' if VOWEL_SOUND.match(self.controller) else 'a'} {self.controller}",
            "class_name": "".join(part.capitalize() for part in self.controller.split("_")) + "Controller",
            "distribution": self.distribution,
            "package": self.package,
            "table": self.table,
            "table_var": self.controller + "_table",
            "date": datetime.date.today().isoformat(),
        }


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    """(relative path, file) of every template file, sorted."""
    found = []
    for entry in folder.iterdir():
        path = f"{prefix}{entry.name}"
        if entry.is_dir():
            found += _files(entry, path + "/")
        elif entry.name.endswith(SUFFIX):
            found.append((path.removesuffix(SUFFIX), entry))
    return sorted(found)


def write_plugin(names: PluginNames, target: Path) -> list[Path]:
    """Write the plugin into `target` (which must not exist, or be empty); the files written."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldRefused(f"{target} exists and is not an empty folder: choose another with --directory")
    values = names.placeholders()
    written = []
    for relative, template in _files(resources.files(__package__).joinpath("template")):
        path = target / relative.format(package=names.package, controller=names.controller)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(template.read_text(encoding="utf-8")).substitute(values), encoding="utf-8")
        written.append(path)
    return written
