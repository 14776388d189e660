"""The plugins' migrations: their Alembic revisions, found through the entry point group
`apid.migrations` (the name is the plugin's branch, the value the package holding the revision
files), which `apid.store.migrate` runs after apid's own. Like the controllers, they are
counted once per distribution however often it is on sys.path, and errors name it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from apid.plugin_host.discovery import PluginError, chosen, distribution_of

MIGRATIONS_GROUP = "apid.migrations"
# A branch name ends the name of its version table, alembic_version_<name>: a plain SQL name
# within PostgreSQL's 63 characters.
BRANCH_NAME = re.compile(r"[a-z][a-z0-9_]{0,46}")


@dataclass(frozen=True)
class MigrationSource:
    """A plugin's Alembic revision files: `name` is its branch (its version table is
    `alembic_version_<name>`), `package` the import package holding the files and `folder`
    that package on disk, where Alembic reads them (so not from a zip)."""

    name: str
    distribution: str
    package: str
    folder: Path

    @property
    def label(self) -> str:
        return f"{self.name} (distribution {self.distribution})"

    @property
    def version_table(self) -> str:
        return f"alembic_version_{self.name}"

    @classmethod
    def from_package(cls, name: str, package: str, distribution: str = "unknown") -> MigrationSource:
        """The revisions in `package` (imported to find its folder) as the branch `name`."""
        label = f"{name} (distribution {distribution})"
        if not BRANCH_NAME.fullmatch(name) or name == "apid":
            raise PluginError(
                f"plugin {label}: the migrations' name must be 1 to 47 lower-case letters, digits or _, "
                f"starting with a letter, and not apid (it names the version table alembic_version_<name>)"
            )
        try:
            folder = resources.files(package)
        except Exception as exc:  # not found, not a package, or its __init__ failed
            raise PluginError(
                f"plugin {label}: migrations package {package} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(folder, Path) and folder.is_dir()):
            raise PluginError(
                f"plugin {label}: migrations package {package} is not a folder on disk "
                f"(a regular package, not zipped, holding the revision files)"
            )
        return cls(name=name, distribution=distribution, package=package, folder=folder)


def migration_sources(
    entry_points: Iterable[metadata.EntryPoint] | None = None, only: Collection[str] = ()
) -> list[MigrationSource]:
    """The installed plugins' migrations (of the distributions `only` names, if any, and apid's:
    `loadPlugins`), sorted by name, each distribution counted once however often it is on
    sys.path; two distributions may not share a name (nor so a version table)."""
    if entry_points is None:
        entry_points = metadata.entry_points(group=MIGRATIONS_GROUP)
    sources: dict[str, MigrationSource] = {}
    for entry_point in entry_points:
        distribution = distribution_of(entry_point)
        if not chosen(distribution, only):
            continue
        taken = sources.get(entry_point.name)
        if taken is None:
            sources[entry_point.name] = MigrationSource.from_package(entry_point.name, entry_point.value, distribution)
        elif taken.distribution != distribution:
            raise PluginError(
                f"plugin {entry_point.name} (distribution {distribution}): migrations named "
                f"{entry_point.name!r} are already provided by {taken.label}"
            )
    return sorted(sources.values(), key=lambda source: source.name)
