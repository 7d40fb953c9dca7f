"""The one way navarch builds a jinja2 environment: StrictUndefined, always.

Templates hold text (cloud-init, systemd units, playbook steps, the plan's Markdown, the
status page, Slack messages), never Python strings; a variable a template names but its
caller did not pass is an error (jinja2.UndefinedError) instead of an empty string in a
node's boot script or a shell command. Each caller says how its output is escaped
(autoescape for HTML, a finalize for shell words or Slack mrkdwn) and how whitespace is
kept; jinja2 is imported on first use, so commands that render nothing start without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from navarch.resources import data_dir

if TYPE_CHECKING:
    import jinja2


def environment(
    *,
    from_templates: bool = True,
    autoescape: bool = False,
    finalize: Callable[[Any], Any] | None = None,
    trim_blocks: bool = False,
    keep_trailing_newline: bool = False,
    filters: Mapping[str, Callable[..., Any]] | None = None,
) -> jinja2.Environment:
    """A jinja2 Environment with StrictUndefined.

    from_templates: load named templates from the shipped templates/ directory
    (navarch.resources.data_dir); False for an environment that only compiles sources it is
    given (env.from_string). autoescape: HTML-escape every expression (pages). finalize:
    applied to every {{ expression }} result (a shell quote, a Slack escape). trim_blocks:
    jinja2's trim_blocks and lstrip_blocks together (a block tag leaves no blank line).
    keep_trailing_newline: keep the template's final newline. filters: extra filters by
    name. Raises ConfigError when templates/ cannot be found (from_templates only).
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))) if from_templates else None,
        undefined=jinja2.StrictUndefined,
        autoescape=autoescape,
        finalize=finalize,
        trim_blocks=trim_blocks,
        lstrip_blocks=trim_blocks,
        keep_trailing_newline=keep_trailing_newline,
    )
    env.filters.update(filters or {})
    return env
