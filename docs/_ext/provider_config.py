"""``provider-config``: the configuration reference, rendered from the provider's own metadata.

The official providers generate this page from ``get_provider_info()["config"]``; so do we,
so an option added to the provider info is documented by the next ``make docs``.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx

from airflow_provider_kafka2pc.get_provider_info import get_provider_info


def _option(section: str, name: str, spec: dict[str, Any]) -> list[nodes.Node]:
    target = f"config-{section}-{name}"
    title = nodes.section(ids=[target])
    title += nodes.title(text=name)
    title += nodes.paragraph(text=spec["description"])
    fields = nodes.field_list()
    env = f"AIRFLOW__{section.upper()}__{name.upper()}"
    for label, value in (
        ("Type", spec.get("type", "string")),
        ("Default", spec.get("default") or '""'),
        ("Example", spec.get("example", "")),
        ("Environment variable", env),
        ("Version added", spec.get("version_added", "")),
    ):
        field = nodes.field()
        field += nodes.field_name(text=label)
        body = nodes.field_body()
        body += nodes.paragraph("", "", nodes.literal(text=str(value)))
        field += body
        fields += field
    title += fields
    return [title]


class ProviderConfig(Directive):
    """Every section and option of the provider's ``config``, in declaration order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for section, spec in get_provider_info()["config"].items():
            block = nodes.section(ids=[f"config-{section}"])
            block += nodes.title(text=f"[{section}]")
            block += nodes.paragraph(text=spec["description"])
            for name, option in spec["options"].items():
                block.extend(_option(section, name, option))
            out.append(block)
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("provider-config", ProviderConfig)
    return {"parallel_read_safe": True, "version": "1"}
