"""A griffe extension for the API reference (mkdocs.yml): csekit's configs are huggingface_hub ``@strict`` dataclasses,
which griffe does not recognise as dataclasses, so each gets the ``__init__`` its fields make (its own and those of
the csekit configs it extends, in order), and the reference shows every field's type and default."""

import griffe


def is_strict(cls: griffe.Class) -> bool:
    return any(str(decorator.value).split(".")[-1] == "strict" for decorator in cls.decorators)


def fields(cls: griffe.Class) -> dict:
    try:
        lineage = [*reversed(cls.mro()), cls]
    except ValueError:
        lineage = [cls]
    found = {}
    for ancestor in lineage:
        if ancestor.is_class and is_strict(ancestor):
            for member in ancestor.members.values():
                if member.is_attribute and not member.is_alias and member.annotation is not None:
                    found[member.name] = member
    return found


class StrictConfigs(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for cls in classes(pkg):
            if is_strict(cls) and "__init__" not in cls.members:
                parameters = [griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)]
                parameters += [griffe.Parameter(name, annotation=member.annotation, default=member.value,
                                                kind=griffe.ParameterKind.keyword_only)
                               for name, member in fields(cls).items()]
                cls.set_member("__init__", griffe.Function("__init__", parent=cls,
                                                           parameters=griffe.Parameters(*parameters)))


def classes(module: griffe.Module):
    for member in module.members.values():
        if member.is_alias:
            continue
        if member.is_module:
            yield from classes(member)
        elif member.is_class:
            yield member
