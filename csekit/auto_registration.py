"""``import csekit`` registers csekit's configs and models with ``AutoConfig`` / ``AutoModel`` without importing
torch: the registration runs when transformers' Auto classes are imported, the moment anything could look a csekit
model up.

Registering needs the classes and the classes need torch, so importing them with the package would make every
``import csekit``, and the ``csekit --help`` command line, pay for torch and transformers' model code. Instead:

* transformers' ``auto`` modules already imported when csekit is: the registration runs now;
* otherwise a post-import hook on ``sys.meta_path`` watches the modules of transformers and of ``csekit.modeling``
  as they are imported, and runs it once ``transformers.models.auto.modeling_auto`` has been imported and no watched
  module is still executing (``modeling_auto`` imports ``configuration_auto``, ``modeling_utils`` imports the Auto
  classes, a csekit model module imports transformers), so the registration never meets a half-imported module. The
  hook removes itself once the registration has run.
* ``configuration_auto`` alone (``AutoConfig``) registers the configs alone
  (`csekit.modeling.register_auto_configs`): reading a csekit ``config.json`` loads no model code.

Using a class from `csekit.modeling` registers too. The registration is
`csekit.modeling.register_auto_classes`.
"""

import importlib.abc
import importlib.machinery
import sys
from importlib import import_module

CONFIG_AUTO, MODEL_AUTO = AUTO_MODULES = ("transformers.models.auto.configuration_auto",
                                          "transformers.models.auto.modeling_auto")
WATCHED_PACKAGES = ("transformers.", "csekit.modeling.")


def register() -> None:
    _HOOK.remove()
    import_module("csekit.modeling").register_auto_classes()


def register_configs() -> None:
    _HOOK.configs_registered = True
    import_module("csekit.modeling").register_auto_configs()


class _WatchedLoader(importlib.abc.Loader):
    """Runs the wrapped loader; when no watched module is executing any more and an Auto module has been imported,
    registers."""

    def __init__(self, loader, hook: "_PostImportHook"):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.hook.running.add(module.__name__)
        try:
            self.loader.exec_module(module)
        finally:
            self.hook.running.discard(module.__name__)
        if module.__name__ in AUTO_MODULES:
            self.hook.imported.add(module.__name__)
        if self.hook.running or not self.hook.installed:
            return
        if MODEL_AUTO in self.hook.imported:
            register()
        elif CONFIG_AUTO in self.hook.imported and not self.hook.configs_registered:
            register_configs()


class _PostImportHook(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.running, self.imported, self.configs_registered = set(), set(), False

    @property
    def installed(self) -> bool:
        return self in sys.meta_path

    def find_spec(self, name, path, target=None):
        if not name.startswith(WATCHED_PACKAGES):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _WatchedLoader(spec.loader, self)
        return spec

    def install(self) -> None:
        if not self.installed:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self.installed:
            sys.meta_path.remove(self)


_HOOK = _PostImportHook()


def register_when_transformers_auto_is_imported() -> None:
    if MODEL_AUTO in sys.modules:
        register()
        return
    _HOOK.install()
    if CONFIG_AUTO in sys.modules:
        register_configs()


__all__ = ["AUTO_MODULES", "register", "register_when_transformers_auto_is_imported"]
